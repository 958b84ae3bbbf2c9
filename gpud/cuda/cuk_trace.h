/* cuk_trace.h — the decode chain's timeline (a -Dcuk_trace=true build): the record, the kernels'
 * ids and names, and the per-object setters, shared by the kernels (cuk_trace.cuh), the host
 * (cudev_trace.c, PINFER_CUDA_TRACE) and bench/gpu/trace_chain.py (which reads the names from the file the
 * host writes, so the three agree). C and C++. Why and what: cuk_trace.cuh. */
#ifndef PI_CUK_TRACE_H
#define PI_CUK_TRACE_H

#include <stdint.h>

/* One block of one launch: written by the block's last thread to leave. t_*: %globaltimer (ns);
 * cyc_*: clock64() cycles since the block's entry (a block stays on its SM: exact within it).
 * t_waited / cyc_wait: when thread (0,0,0) first came back from pdl_wait(); 0 when it never called it. */
struct cuk_trace_rec {
    uint32_t fid;     /* enum cuk_trace_fid */
    uint32_t smid;    /* %smid */
    uint32_t block;   /* blockIdx linear: x + gridDim.x (y + gridDim.y z) */
    uint32_t nblocks; /* the launch's blocks: gridDim.x · gridDim.y · gridDim.z */
    uint64_t t_entry, t_waited, t_exit;
    uint32_t cyc_wait, cyc_exit;
};
#ifdef __cplusplus
static_assert(sizeof(struct cuk_trace_rec) == 48, "the file's record");
#else
_Static_assert(sizeof(struct cuk_trace_rec) == 48, "the file's record");
#endif

/* Every kernel that runs in a decode or prefill step, one id each (the upload-time k_repack,
 * k_repack_t, k_dequant_f16 and the bench's k_read are left out). A new kernel: one X() line here and
 * CUK_TRACE_BLOCK(CUK_F_<name>) first in its body; a new .cu file: one line in CUK_TRACE_SETTERS. */
#define CUK_TRACE_KERNELS(X)                                                                                           \
    X(k_mmv)                                                                                                           \
    X(k_mma_mv)                                                                                                        \
    X(k_mma_mm)                                                                                                        \
    X(k_mma_gm)                                                                                                        \
    X(k_split_x)                                                                                                       \
    X(k_attn_part)                                                                                                     \
    X(k_rope_store)                                                                                                    \
    X(k_pattn)                                                                                                         \
    X(k_gemv)                                                                                                          \
    X(k_glu)                                                                                                           \
    X(k_gemv_q1)                                                                                                       \
    X(k_glu_q1)                                                                                                        \
    X(k_quant_x)                                                                                                       \
    X(k_quant_x8k)                                                                                                     \
    X(k_norm_quant_x)                                                                                                  \
    X(k_axpy)                                                                                                          \
    X(k_chunk_sum)                                                                                                     \
    X(k_compact)                                                                                                       \
    X(k_iota)                                                                                                          \
    X(k_rmsnorm)                                                                                                       \
    X(k_get_rows)                                                                                                      \
    X(k_add_bias)                                                                                                      \
    X(k_add2)                                                                                                          \
    X(k_glu_ew)                                                                                                        \
    X(k_mask_mul)                                                                                                      \
    X(k_relu)                                                                                                          \
    X(k_threshold)                                                                                                     \
    X(k_topk_slice)                                                                                                    \
    X(k_topk_merge)                                                                                                    \
    X(k_top1)                                                                                                          \
    X(k_to_half)                                                                                                       \
    X(k_hand_out)                                                                                                      \
    X(k_hand_add)                                                                                                      \
    X(k_gather_mask)

enum cuk_trace_fid {
    CUK_F_NONE = 0, /* a slot never written (the ring is zeroed) */
#define CUK_TRACE_ENUM_(k) CUK_F_##k,
    CUK_TRACE_KERNELS(CUK_TRACE_ENUM_)
#undef CUK_TRACE_ENUM_
    CUK_F_COUNT /* the ids in all, the last entry */
};

/* the kernel's name ("k_mmv"), "none" for 0, NULL past the table */
static inline const char *cuk_trace_name(int fid)
{
#define CUK_TRACE_NAME_(k) #k,
    static const char *const names[CUK_F_COUNT] = { "none", CUK_TRACE_KERNELS(CUK_TRACE_NAME_) };
#undef CUK_TRACE_NAME_
    return fid >= 0 && fid < CUK_F_COUNT ? names[fid] : NULL;
}

/* The file PINFER_CUDA_TRACE names (cudev_trace.c), little-endian: this header, then n_fid names of
 * CUK_TRACE_NAME_BYTES (NUL-padded, index = fid), then min(n, cap) records in ring-slot order (record
 * k went to slot k % cap: when n > cap only the last cap exist). */
#define CUK_TRACE_MAGIC "CUKTRACE"
#define CUK_TRACE_VERSION 1
#define CUK_TRACE_NAME_BYTES 32
struct cuk_trace_file_head {
    char magic[8];     /* CUK_TRACE_MAGIC, no NUL */
    uint32_t version;  /* CUK_TRACE_VERSION */
    uint32_t rec_size; /* sizeof(struct cuk_trace_rec) */
    uint64_t cap;      /* slots of the ring */
    uint64_t n;        /* records appended in all */
    uint32_t n_fid;    /* CUK_F_COUNT */
    uint32_t clock_khz; /* the SM clock the device reports (cudaDevAttrClockRate), 0 unknown */
};

/* Each .cu file is its own object (no -rdc), so each has its own copy of the device-side ring
 * pointers (cuk_trace.cuh's cuk_tr), set by its own setter; all are given the same ring and counter.
 * buf NULL: the kernels write nothing. 0 or a negative cudaError_t. Defined only in a CUK_TRACE build. */
#define CUK_TRACE_SETTERS(X)                                                                                           \
    X(cuk_weights_trace_set)                                                                                           \
    X(cuk_gemv_trace_set)                                                                                              \
    X(cuk_sparse_trace_set)                                                                                            \
    X(cuk_elem_trace_set)                                                                                              \
    X(cuk_attn_trace_set)                                                                                              \
    X(cuk_mma_trace_set)                                                                                               \
    X(cuk_mmv_trace_set)                                                                                               \
    X(cuk_hand_trace_set)                                                                                              \
    X(cuk_pattn_trace_set)                                                                                             \
    X(cuk_topk_trace_set)                                                                                              \
    X(cuk_place_trace_set)

#ifdef __cplusplus
extern "C" {
#endif
#define CUK_TRACE_PROTO_(fn) int fn(void *buf, void *n, unsigned long long cap);
CUK_TRACE_SETTERS(CUK_TRACE_PROTO_)
#undef CUK_TRACE_PROTO_
#ifdef __cplusplus
}
#endif

#endif
