/* cpud.h — the CPU worker stage: computes the FFN neurons assigned to the CPU (gpu_idx = 0) that
 * are active for each step, with a pool of -t threads, and hands the partial result to gpud. */
#ifndef PI_CPUD_H
#define PI_CPUD_H

#include "act.h"
#include "ffn_split.h"
#include "model.h"
#include "ncache.h"
#include "stage.h"
#include "disk_io.h"

struct cpud {
    struct stage_rt rt;
    struct pi_model *m;
    struct shm_seg act_seg;
    struct act_view act;
    struct pi_pool *pool;
    struct ffn_scratch ffn;
    struct ffn_runs cold;
    float *xn;             /* (n_batch, n_embd) */
    uint64_t last_epoch, last_seq; /* last step done: a duplicate of it (from the other ring) is skipped */
    /* the disk tier (pi_ctl.ram_budget > 0): cold neurons read from the bundle into a neuron cache,
     * the next layer's prefetched from the predictor of layer + 1 over this step's h */
    struct ncache *nc;
    struct disk_io dio;     /* its reader: loaderd through the ncache segment, pread while it is down */
    bool have_dio;
    uint8_t *tier;          /* (n_layer, n_ff) enum pi_tier */
    uint8_t *mask2;         /* (n_batch, n_ff) the next layer's predicted masks */
    struct ops_scratch pred;
    struct ffn_runs next;
    bool dev_known;         /* gpud's backend_used was read (device_check) */
    bool beside_device;     /* gpud computes on a device, not on these cores */
    unsigned spin_us;       /* beside a device: how long cpud and its workers spin for the next step */
    /* where a decode step's time goes (one-token steps; printed at exit): the norm, masks and runs
     * before the kernels, ffn_partial, the result published, and the gap from one step's end to the
     * next one's start (waiting for gpud) */
    uint64_t ph_steps, ph_prep_ns, ph_norm_ns, ph_runs_ns, ph_ffn_ns, ph_pub_ns, ph_gap_ns, ph_last_end;
    uint64_t ph_mwait_ns; /* of prep: the wait for the masks' key after the norm of an early h */
    uint64_t ph_input_ns; /* of the norm: the FFN's input made from it (ffn_input_prepare) */
    uint64_t input_ns;    /* the last step's */
    /* the FFN times of the last CPUD_FFN_SAMPLES one-token steps (ns), for the median and the 90th
     * percentile beside the mean: whether a slow mean is every step or a few stalled ones */
#define CPUD_FFN_SAMPLES 4096
    uint32_t ph_ffn_sample[CPUD_FFN_SAMPLES];
};

int cpud_init(struct cpud *c, int argc, char **argv);
int cpud_run(struct cpud *c);
void cpud_fini(struct cpud *c);

#endif
