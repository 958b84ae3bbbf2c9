/* load.h — loaderd's job: put the model file's exact byte image into the "weights" segment,
 * validate it, and publish a tensor directory (ipc/pipeline_layout.h describes the segment).
 *
 * Weights segment layout (PI_SEG_KIND_WEIGHTS, created by the supervisor):
 *   offsets[0]  struct pi_weights_info (right after the segment header)
 *   offsets[1]  the image: file_size bytes, PI_WEIGHTS_ALIGN-aligned, followed by slack up to the
 *               next PI_WEIGHTS_ALIGN boundary (the O_DIRECT read of the file's last block lands there)
 *   offsets[2]  the directory: n_tensors × struct pi_tensor_dirent
 *
 * Supervisor:  loader_probe_file -> shm_create(LOADER_SEG_WEIGHTS, PI_SEG_KIND_WEIGHTS,
 *              loader_weights_seg_bytes(size, n)) -> loader_weights_seg_init -> shm_publish.
 * loaderd:     shm_attach (writable) -> loader_weights_view -> loader_load.
 * Other stages wait for info->state == READY (acquire) and then use the image read-only. */
#ifndef PI_LOADERD_LOAD_H
#define PI_LOADERD_LOAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline_layout.h"
#include "shm.h"

#define LOADER_SEG_WEIGHTS "weights"          /* segment name of the weights (ipc/pipeline_layout.h) */
#define LOADER_NAME_MAX 63                    /* longest tensor name the directory holds (+ NUL) */
/* Test hook: "buffered" or "pread" force that method; "direct_einval" makes the first O_DIRECT read
 * fail with EINVAL, as on a file system that refuses O_DIRECT only when reading. */
#define LOADER_ENV_FORCE "PINFER_LOADER_FORCE"
#define LOADER_ENV_FAIL_READ "PINFER_LOADER_FAIL_READ" /* test hook: the Nth read fails with EIO */
#define LOADER_METHOD_CAP 64                  /* == sizeof(pi_ctl.load_method) */

/* Bytes of a weights segment for a file of file_size bytes with n_tensors tensors (0 if absurd:
 * the sum overflows). */
size_t loader_weights_seg_bytes(uint64_t file_size, uint64_t n_tensors);

/* Where the image starts in such a segment (offsets[1]; 0 if absurd): the file's byte k is at
 * image + k. */
uint64_t loader_weights_image_offset(uint64_t file_size, uint64_t n_tensors);

/* Fill the header offsets of a freshly created weights segment (seg->size must be at least
 * loader_weights_seg_bytes) and its info: state EMPTY, file_size, directory capacity. Does not
 * publish. */
int loader_weights_seg_init(struct shm_seg *seg, uint64_t file_size, uint64_t n_tensors);

/* Size and tensor count of a model file, from stat and the GGUF header (24 bytes), for sizing the
 * segment. The full validation happens in loader_load. */
int loader_probe_file(const char *path, uint64_t *file_size, uint64_t *n_tensors);

/* The parts of an attached weights segment, bounds-checked against its size. */
struct loader_weights {
    struct pi_weights_info *info;
    void *image;            /* PI_WEIGHTS_ALIGN-aligned */
    uint64_t image_cap;     /* bytes from image to the directory: file size + slack */
    struct pi_tensor_dirent *dir;
    uint64_t dir_cap;       /* directory entries that fit */
};
int loader_weights_view(const struct shm_seg *seg, struct loader_weights *w);

/* Where loader_load reports progress; every pointer may be NULL. The atomics are normally the
 * ctl segment's load_done_bytes / load_total_bytes / load_ns (relaxed stores: they are display
 * only). method receives "io_uring O_DIRECT", "io_uring buffered (O_DIRECT refused: ...)" or
 * "pread (io_uring refused: ...)". */
struct loader_progress {
    _Atomic uint64_t *done_bytes;
    _Atomic uint64_t *total_bytes;
    _Atomic uint64_t *load_ns;
    char *method;
    size_t method_cap;
    bool (*cancel)(void *arg);  /* polled while reading: true aborts the load (stop requested) */
    void *cancel_arg;
};

enum loader_outcome {
    LOADER_LOADED = 0,      /* the file was read and validated */
    LOADER_REATTACHED = 1,  /* the segment already held this file (READY, same identity): nothing read */
};

/* Load `path` into the segment (see the top of this file). On success info->state is READY
 * (release store) and *outcome says whether anything was read. On failure info->state is FAILED,
 * info->error holds the message (also pi_errmsg) naming the file, and a negative code is returned. */
int loader_load(const struct loader_weights *w, const char *path, const struct loader_progress *prog,
                enum loader_outcome *outcome);
/* The same, except that the whole pages of the tensors skip_tensor(name) names are neither read from
 * the file nor written: they stay as the segment had them (zero). A disk tier's FFN rows come from
 * the bundle, so the load reads only the dense tensors' bytes. The directory still describes every
 * tensor. */
int loader_load_except(const struct loader_weights *w, const char *path, const struct loader_progress *prog,
                       bool (*skip_tensor)(const char *name), enum loader_outcome *outcome);

/* The whole pages (URING_ALIGN = 4096) of the tensors `skip_tensor` names, as sorted file ranges
 * (*out, malloc'd, [begin, end) pairs; *n_out of them): read from the file's header alone. These are
 * the pages loader_load_except leaves untouched, so the supervisor can leave them unallocated. */
int loader_skip_ranges(const char *path, bool (*skip_tensor)(const char *name), uint64_t (**out)[2], size_t *n_out);

#endif
