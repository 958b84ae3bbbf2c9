/* backend.h — what gpud asks of a compute device, one layer step at a time.
 *
 * The residual stream x, the KV cache, the FFN input and the weights live on the device; only what
 * crosses to other stages is a host array: h (the FFN input before ffn_norm) goes out to the act
 * segment for predictord and cpud, and cpud's cold share comes back in. One layer:
 *
 *   attn(layer)                       x += attn(attn_norm(x))          (KV cache written)
 *   get_h(h)                          h = x, to the host
 *   ffn_begin(layer)                  n = ffn_norm(x); pending = 0
 *   ffn_runs(layer, hot runs)         pending += FFN over the runs of n
 *   ffn_runs(layer, cold runs)        (only when cpud is down)
 *   ffn_end(y_cold or NULL)           x += pending + y_cold
 *
 * The CPU backend (backend_cpu.c) runs the in-process engine's kernels; the CUDA executor
 * implements the same table (gpud/cuda/), and tests compare every op against the CPU one. */
#ifndef PI_ENGINE_BACKEND_H
#define PI_ENGINE_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "ffn_split.h"
#include "model.h"

struct be;

struct be_params {
    int32_t n_ctx;     /* KV cache length */
    int32_t n_batch;   /* most tokens per step */
    int32_t n_threads; /* host threads the backend may use */
};

struct be_ops {
    const char *name;
    int (*open)(struct be **out, const struct pi_model *m, const struct be_params *p);
    void (*close)(struct be *b);
    int32_t (*n_ctx)(const struct be *b);
    int (*embed)(struct be *b, const int32_t *toks, int32_t B);
    int (*attn)(struct be *b, int layer, int32_t B, int32_t pos);
    int (*get_h)(struct be *b, int32_t B, float *h);
    int (*ffn_begin)(struct be *b, int layer, int32_t B);
    /* *bytes (may be NULL) receives the weight bytes read */
    int (*ffn_runs)(struct be *b, int layer, int32_t B, const struct ffn_runs *runs, uint64_t *bytes);
    int (*ffn_end)(struct be *b, int32_t B, const float *y_host);
    /* logits (B or 1, n_vocab) to the host: every token's when all, else the last one's */
    int (*output)(struct be *b, int32_t B, float *logits, bool all);
    /* Let idle worker threads sleep: gpud is about to wait on another stage. NULL if not needed. */
    void (*idle)(struct be *b);
};

extern const struct be_ops be_cpu_ops;

/* The backend named name ("cpu"; "cuda" when built with it), or NULL. */
const struct be_ops *be_find(const char *name);

#endif
