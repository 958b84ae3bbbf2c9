/* cuk.h — the CUDA kernels of the GPU executor, behind a C interface. Implemented by one file a
 * concern: cuk_weights.cu (sizes, repacking, cuk_get_rows, cuk_dequant_f16), cuk_gemv.cu (cuk_gemv*,
 * cuk_glu, cuk_normq_*), cuk_sparse.cu (cuk_axpy_rows, cuk_compact, cuk_iota), cuk_elem.cu (norms,
 * elementwise, cuk_to_half), cuk_attn.cu (RoPE, the KV store, the decode attention), cuk_topk.cu
 * (cuk_argmax), cuk_device.cu (cuk_sm_count, cuk_read_bench).
 *
 * Everything here takes device pointers and a stream (cudaStream_t passed as void *) and only
 * enqueues work: launchers return 0 or a negative cudaError_t of the launch. No CUDA header is
 * needed to include this file, so the C side of the backend (cudev*.c) and the tests stay C11.
 *
 * Weights on the device (struct cuk_w): F32 / F16 / BF16 rows exactly as in the GGUF (row-major,
 * n_in contiguous); the quantized types repacked at upload into two arrays, the quants of every
 * 32-element lane block (16 bytes, 32 for Q8_0, so each lane loads whole 16-byte words),
 * [n_out][n_in / 32], and per row a side array: Q8_0 / Q4_0 their f16 block scales, the other
 * types (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS) scales, mins and high bits as
 * cuk_traits.cuh lays them out. One templated GEMV over a block-type traits struct serves all 15.
 *
 * Batch invariance: every kernel here computes each token (row of the batch) with the same
 * instructions in the same order whatever the other tokens are; reductions are over fixed-shape
 * trees (warp shuffles, chunk sums in chunk order) that depend only on that token's data. */
#ifndef PI_CUK_H
#define PI_CUK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cuk_w {
    uint32_t type;  /* enum pi_type: F32, F16, BF16, Q8_0, Q4_0 and the 10 others of cuk_traits.cuh */
    int64_t n_in;   /* ne[0] */
    int64_t n_out;  /* ne[1] */
    void *q;        /* rows (float types) or block quants (Q types) */
    void *d;        /* Q types: per row the side data (Q8_0/Q4_0: f16 block scales [n_in/32]); NULL otherwise */
};

/* Bytes of a repacked weight's q and d arrays (d 0 for float types); 0 if the type is unsupported
 * or n_in is not a multiple of its block. */
size_t cuk_w_qbytes(uint32_t type, int64_t n_in, int64_t n_out);
size_t cuk_w_dbytes(uint32_t type, int64_t n_in, int64_t n_out);
bool cuk_type_ok(uint32_t type);

/* Repack n_rows rows of GGUF blocks (raw, on the device) into w starting at row r0. Float types:
 * a plain device copy. */
int cuk_repack(const struct cuk_w *w, const void *raw, int64_t r0, int64_t n_rows, void *st);

/* GEMV epilogues */
enum cuk_mode {
    CUK_SET = 0,   /* y = W x */
    CUK_ADD = 1,   /* y += W x (residual) */
    CUK_RELU = 2,  /* y = max(W x, 0) (predictor fc1) */
    CUK_MASK = 3,  /* mask (uint8) = W x >= thr (predictor fc2) */
    CUK_SPLIT3 = 4, /* cuk_gemv_split3 only */
};

/* y (B, n_out) op= W · x (B, n_in), f32 accumulation. Any B: up to 8 tokens as a GEMV (the weight
 * row read once for all of them), more as the same kernel tiled over groups of 8 tokens (prefill);
 * each (row, token) is reduced in one order whatever B is. For CUK_MASK, y is a uint8_t (B, n_out)
 * array. x and y strides are n_in and n_out. Float weight types dot the f32 x; Q8_0/Q4_0 weights
 * (and every other quantized type; the super-block ones against the CPU's Q8_K rounding) dot x
 * quantized to int8 into xq, a scratch of B × cuk_xq_row_bytes(n_in) bytes (NULL for F32). F16 /
 * BF16 weights go to the tensor-core kernels (cuk_mma.h: the same modes, xq holding the f16/bf16
 * hi/lo split of x for batches of more than 8). */
int cuk_gemv(const struct cuk_w *w, const float *x, int B, void *y, enum cuk_mode mode, float thr, void *xq, void *st);
size_t cuk_xq_row_bytes(int64_t n_in);
/* cuk_gemv (mode CUK_RELU or CUK_MASK) that also hands its input out to the host share (cuk_hand.h):
 * h (n_h bytes, mapped host memory) = x, then *key = seq (system-scope release), before the product
 * is done — where one launch does the product (one token of a 32-element Q type: the one-launch
 * kernels, PINFER_CUDA_Q1). 1: it does not apply here (nothing launched: the caller takes cuk_gemv
 * and hands h out with the masks). */
int cuk_gemv_hand_h(const struct cuk_w *w, const float *x, int B, void *y, enum cuk_mode mode, float thr, void *h,
                    int64_t n_h, uint64_t *key, uint64_t seq, void *st);
/* One launch for three stacked weights (q, k, v): rows [0, n0) of W go to y0 (B, n0), the next n1
 * to y1 (B, n1), the rest to y2. */
int cuk_gemv_split3(const struct cuk_w *w, const float *x, int B, float *y0, int64_t n0, float *y1, int64_t n1,
                    float *y2, void *xq, void *st);

/* act (B, n) = act(gate · x, up · x) over rows: dense (idx NULL: rows 0..n_out), or for each
 * token b the rows idx[b * idx_stride + j], j < cnt[b] (device counts; any B). xq as for cuk_gemv. compact: act[b][j], else
 * act[b][idx[j]] (scatter into a zeroed n_out-wide row). act_kind: enum pi_act. */
int cuk_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, int B, float *act, int act_kind,
            const int32_t *idx, const int32_t *cnt, int64_t idx_stride, bool compact, void *xq, void *st);

/* The sparse down projection: for each token b, y[b] op= Σ_j act[b][j] · down_t[idx[b][j]],
 * j < cnt[b] (NULL idx: rows 0..n, cnt NULL: all n_out rows of down_t), act compact as cuk_glu
 * writes it. Zero activations skip their row. Chunks of CUK_AXPY_CHUNK neurons are summed into
 * part (B, n_out / CUK_AXPY_CHUNK, n_embd) and then in chunk order into y: the same order for a
 * token whatever the batch. add: y += result, else y = result. */
#define CUK_AXPY_CHUNK 16
#define CUK_AXPY_MAX_B 8 /* tokens per launch: part holds this many (larger B goes in groups) */
int cuk_axpy_rows(const struct cuk_w *down_t, const float *act, int B, const int32_t *idx, const int32_t *cnt,
                  int64_t idx_stride, float *part, float *y, bool add, void *st);
size_t cuk_axpy_part_floats(int64_t n_ff, int64_t n_embd, int B); /* B ≤ CUK_AXPY_MAX_B */

/* For each token b: idx[b][0..cnt[b]) = the i < n with mask[b * n + i] != 0, in order. */
int cuk_compact(const uint8_t *mask, int B, int64_t n, int32_t *idx, int32_t *cnt, void *st);
/* idx[b][i] = i, cnt[b] = n (the dense "all neurons" list). */
int cuk_iota(int B, int64_t n, int32_t *idx, int32_t *cnt, void *st);

/* out (B, n) = rmsnorm(x) * w; rows_x is x's row stride (to norm only the last rows). */
int cuk_rmsnorm(float *out, const float *x, const float *w, int B, int64_t n, int64_t stride_x, float eps,
                void *st);
/* out[b] = row ids[b] of the table (any supported type), as f32. */
int cuk_get_rows(const struct cuk_w *t, const int32_t *ids, int B, float *out, void *st);
/* y (B, n) += b (n) */
int cuk_add_bias(float *y, const float *bias, int B, int64_t n, void *st);
/* x (n) += a (n) (+ b (n) when not NULL): the merge of the FFN shares, a first */
int cuk_add2(float *x, const float *a, const float *b, int64_t n, void *st);
/* elementwise: out = act(g, u) (n) */
int cuk_glu_ew(float *out, const float *g, const float *u, int64_t n, int act_kind, void *st);
/* elementwise: x (B, n) *= mask (uint8, B × n) */
int cuk_mask_mul(float *x, const uint8_t *mask, int64_t n, void *st);
/* elementwise: y (n) = relu(y) / y >= thr (uint8) */
int cuk_relu(float *y, int64_t n, void *st);
int cuk_threshold(const float *y, uint8_t *mask, int64_t n, float thr, void *st);

/* Q types with 32-element blocks (the Q8_0-quantized activation): x's RMSNorm (cuk_rmsnorm's bits)
 * and its quantization in one launch into xq, then cuk_gemv_split3 / cuk_glu on it — the bits of
 * the three launches, one fewer. Return 1 (nothing enqueued) for the other types. */
int cuk_normq_split3(const struct cuk_w *w, const float *x, const float *norm_w, float eps, int B, float *y0,
                     int64_t n0, float *y1, int64_t n1, float *y2, void *xq, void *st);
int cuk_normq_glu(const struct cuk_w *gate, const struct cuk_w *up, const float *x, const float *norm_w, float eps,
                  int B, float *act, int act_kind, const int32_t *idx, const int32_t *cnt, int64_t idx_stride,
                  bool compact, void *xq, void *st);

/* KV cache geometry: cells [n_seq][n_ctx][n_kv_heads * head_dim] per layer, f16 or f32. */
struct cuk_attn_geom {
    int n_head, n_head_kv, head_dim, rope_dim, rope_mode; /* rope_mode: enum ops_rope_mode */
    float rope_theta;
    int n_ctx, n_seq;
    bool f16;
    bool cluster; /* a token's chunks merged in a cluster where they fit one (cuk_attn_cluster_ok) */
};

/* Rotate q (B, n_head·d) and k (B, n_kv·d) in place at pos[b], then store k and v into the cache
 * cells (seq[b], pos[b]). inv_freq (rope_dim / 2): 1 / theta^(2i / rope_dim), from the host. */
int cuk_rope_store(const struct cuk_attn_geom *g, float *q, float *k, const float *v, const int32_t *pos,
                   const int32_t *seq, void *k_cache, void *v_cache, const float *inv_freq, int B, void *st);
/* out (B, n_head·d) = softmax(q · K[seq[b]][0..pos[b]] / sqrt(d)) · V[...]: each token attends to the
 * cells of its own sequence at positions ≤ its own, split into fixed chunks of 32 cells merged in
 * chunk order (the same order whatever the batch). part: cuk_attn_part_floats(g, B) floats, zero
 * before the first call (its arrival counters; each launch leaves them zero again).
 * max_pos: the largest pos[b] when the host knows it (fewer empty blocks launched), else -1. */
int cuk_attn(const struct cuk_attn_geom *g, const float *q, const void *k_cache, const void *v_cache,
             const int32_t *pos, const int32_t *seq, float *out, float *part, int B, int32_t max_pos, void *st);
size_t cuk_attn_part_floats(const struct cuk_attn_geom *g, int B);
/* Whether the attention after a q/k/v product on qkv (NULL: not one weight) merges each token's chunks
 * in a cluster of blocks where they fit one (positions below 256; geom.cluster): where qkv streams on
 * the one-block-an-SM kernel (cuk_mmv.h), which leaves room for a cluster's blocks beside it — beside
 * the Q types' products the clusters lost (bench/gpu/NOTES.md r5, r6). PINFER_CUDA_ATTN_CLUSTER: 0
 * never, 2 always (the tests' way to run it on any model), else this; never where the device cannot
 * place such a cluster (cudaOccupancyMaxActiveClusters: 0). */
bool cuk_attn_cluster_ok(const struct cuk_w *qkv);
/* cuk_rope_store then cuk_attn, the same bits; for one token (and a kv head per head) one launch
 * fewer: the attention rotates q itself, and its block over the token's own cell rotates k and
 * stores k and v first (q and k are then left unrotated). PINFER_CUDA_ROPE_FUSE=0: always the two.
 * l2_next (NULL: none): the weight the next product reads; for one token the attention's blocks
 * fetch it into L2 after their wait (the attention reads little from the HBM; see cuk_attn.cu). */
int cuk_rope_attn(const struct cuk_attn_geom *g, float *q, float *k, const float *v, const int32_t *pos,
                  const int32_t *seq, void *k_cache, void *v_cache, const float *inv_freq, float *out, float *part,
                  int B, int32_t max_pos, const struct cuk_w *l2_next, void *st);
/* Head sizes the attention kernel supports (32, 64, 128, 256). */
bool cuk_attn_ok(int head_dim);

/* ids[b] = argmax of logits row b (n): the lowest index among equal maxima, in cuk_topk's order (NaN
 * lowest, -0 = +0): its k = 1 kernel (cuk_topk.cu). */
int cuk_argmax(const float *logits, int B, int64_t n, int32_t *ids, void *st);

/* For cuBLAS: x (n) f32 → f16 or bf16 bits. */
int cuk_to_half(const float *x, void *out, int64_t n, bool bf16, void *st);
/* Dequantize rows [0, n_out) of a Q weight into an f16 matrix (n_out, n_in). */
int cuk_dequant_f16(const struct cuk_w *w, void *out, void *st);

/* HBM floor: read n bytes (multiple of 16) once, with 16-byte loads; *sink keeps it live. */
int cuk_read_bench(const void *buf, size_t n, unsigned long long *sink, void *st);
/* the device's multiprocessors (read once) */
int cuk_sm_count(void);

#endif
