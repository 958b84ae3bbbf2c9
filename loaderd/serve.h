/* serve.h — loaderd's streaming: after the weights are loaded, loaderd serves the disk tier's
 * reads. cpud publishes its neuron cache as the "ncache" segment (ipc/ncache_shm.h) and queues a
 * read for each neuron (or run of consecutive neurons) it lacks or predicts for the next layer;
 * loaderd takes each request (CAS of its claim), reads the bundle with io_uring (O_DIRECT, up to
 * STREAM_QD in flight, registered buffers when the kernel allows: stream.h) into the slot, and
 * hands the completion back on the cq ring. A new generation of the segment (a restarted cpud)
 * is re-attached after the reads into the old one have completed. */
#ifndef PI_LOADERD_SERVE_H
#define PI_LOADERD_SERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "load.h"
#include "ncache_shm.h"
#include "stage.h"
#include "stream.h"

/* Test hook: the Nth read loaderd streams fails with EIO (as a bad sector would). */
#define SERVE_ENV_FAIL_READ "PINFER_LOADER_FAIL_STREAM"

struct serve {
    struct stage_rt *rt;
    struct ncshm_view v;
    bool attached;
    uint64_t gen;
    int fd;                 /* the bundle, O_DIRECT when the file system takes it */
    struct stream_io sio;
    bool have_sio;
    unsigned inflight;
    uint64_t fail_at, n_done;
    char note[256];         /* the last attach problem, logged once */
};

/* --ram-budget with no FFN neuron on gpud (every gpu_idx 0 in the act segment): before the load,
 * record in pi_ctl.weights_trimmed that no stage may read an FFN row from the image (cpud reads
 * them through its cache, gpud waits for cpud); after it, punch the FFN tensors' pages out of the
 * weights segment (FALLOC_FL_PUNCH_HOLE), so the segment holds only what is read densely. */
void serve_trim_decide(struct stage_rt *rt);
int serve_trim_punch(struct stage_rt *rt, const struct loader_weights *w);
/* blk.N.ffn_{gate,up,down,down_t}.weight: what a trimmed load leaves unread (loader_load_except)
 * and serve_trim_punch punches out (the pages a tensor shares with a neighbour) */
bool serve_is_ffn_tensor(const char *name);

void serve_init(struct serve *s, struct stage_rt *rt);
/* One round: (re-)attach, take requests, submit, reap; sleeps at most idle_ms when there is
 * nothing to do. Errors of the segment or the bundle are logged and retried, never fatal: cpud
 * reads by itself meanwhile. */
void serve_poll(struct serve *s, int idle_ms);
void serve_fini(struct serve *s);

#endif
