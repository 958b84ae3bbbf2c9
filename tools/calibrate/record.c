/* record.c — activation recording: run the dense model over the calibration text and keep, for every
 * layer, each token's FFN input h (before ffn_norm: what the predictor sees at run time) and which
 * neurons fired (activation != 0, i.e. computing the neuron changes the output: for ReGLU
 * relu(g)·u that is g > 0, for dReLU g > 0 and u > 0). */
#include "cal_internal.h"

#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "model.h"
#include "pi_err.h"
#include "tokenizer.h"

uint64_t cal_rec_bytes(int32_t n_layer, int32_t n_embd, int32_t n_ff, int32_t n_rows)
{
    const uint64_t per_layer = (uint64_t)n_rows * (uint64_t)n_embd * sizeof(float) +
                               (uint64_t)n_rows * (uint64_t)((n_ff + 7) / 8) + (uint64_t)n_ff * sizeof(uint64_t);
    return per_layer * (uint64_t)n_layer;
}

int cal_rec_init(struct cal_rec *r, int32_t n_layer, int32_t n_embd, int32_t n_ff, int32_t n_train, int32_t n_held)
{
    memset(r, 0, sizeof *r);
    if (n_layer <= 0 || n_embd <= 0 || n_ff <= 0 || n_train < 0 || n_held < 0)
        return pi_fail(PI_E_INVAL, "calibrate: bad recording shape");
    r->n_layer = n_layer;
    r->n_embd = n_embd;
    r->n_ff = n_ff;
    r->n_train = n_train;
    r->n_rows = n_train + n_held;
    r->mask_stride = (size_t)(n_ff + 7) / 8;
    r->h = calloc((size_t)n_layer, sizeof *r->h);
    r->fired = calloc((size_t)n_layer, sizeof *r->fired);
    r->count = calloc((size_t)n_layer, sizeof *r->count);
    if (!r->h || !r->fired || !r->count)
        goto nomem;
    const size_t rows = r->n_rows > 0 ? (size_t)r->n_rows : 1;
    for (int l = 0; l < n_layer; l++) {
        r->h[l] = malloc(rows * (size_t)n_embd * sizeof(float));
        r->fired[l] = calloc(rows, r->mask_stride);
        r->count[l] = calloc((size_t)n_ff, sizeof(uint64_t));
        if (!r->h[l] || !r->fired[l] || !r->count[l])
            goto nomem;
    }
    return 0;
nomem:
    cal_rec_fini(r);
    return pi_fail(PI_E_NOMEM, "calibrate: out of memory for the activation recording (%d layers x %d tokens)",
                   n_layer, n_train + n_held);
}

void cal_rec_fini(struct cal_rec *r)
{
    for (int l = 0; l < r->n_layer; l++) {
        if (r->h) free(r->h[l]);
        if (r->fired) free(r->fired[l]);
        if (r->count) free(r->count[l]);
    }
    free(r->h);
    free(r->fired);
    free(r->count);
    memset(r, 0, sizeof *r);
}

/* The forward pass's FFN hook: h (B, n_embd), act (B, n_ff) of the tokens at positions pos.. of the
 * current chunk, whose rows start at r->row_base. */
static void rec_hook(void *user, int layer, int32_t B, int32_t pos, const float *h, const float *act)
{
    struct cal_rec *r = user;
    const int32_t E = r->n_embd, F = r->n_ff;
    for (int32_t b = 0; b < B; b++) {
        const int32_t row = r->row_base + pos + b;
        if (row >= r->row_end)
            break;
        memcpy(r->h[layer] + (size_t)row * E, h + (size_t)b * E, (size_t)E * sizeof(float));
        uint8_t *mask = r->fired[layer] + (size_t)row * r->mask_stride;
        uint64_t *count = r->count[layer];
        const float *a = act + (size_t)b * F;
        for (int32_t j = 0; j < F; j++)
            if (a[j] != 0.0f) {
                mask[j >> 3] |= (uint8_t)(1u << (j & 7));
                count[j]++;
            }
    }
}

int cal_record(struct cal_rec *r, const struct pi_model *m, const int32_t *toks, size_t n_toks, int32_t chunk,
               int32_t n_threads, struct cal_progress *prog)
{
    const bool bos = tok_add_bos(m->tok) && tok_bos(m->tok) >= 0;
    const int32_t text_per_chunk = chunk - (bos ? 1 : 0);
    if (text_per_chunk < 1)
        return pi_fail(PI_E_INVAL, "calibrate: chunk of %d tokens is too short", chunk);
    const int32_t n_held = r->n_rows - r->n_train;
    const int64_t n_train_chunks = (r->n_train + chunk - 1) / chunk, n_held_chunks = (n_held + chunk - 1) / chunk;
    const int64_t need = n_train_chunks + n_held_chunks, avail = (int64_t)(n_toks / (size_t)text_per_chunk);
    if (need == 0)
        return 0;
    if (avail < need)
        return pi_fail(PI_E_RANGE,
                       "calibrate: the text has %zu tokens, enough for %lld chunks of %d but %lld are needed for "
                       "%d tokens (give more text or lower --tokens/--heldout)",
                       n_toks, (long long)avail, chunk, (long long)need, r->n_rows);

    struct pi_ctx *c = NULL;
    int32_t *buf = malloc((size_t)chunk * sizeof *buf);
    int rc = 0;
    if (!buf)
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory");
    struct pi_ctx_params cp = { .n_ctx = chunk, .n_batch = chunk, .n_threads = n_threads };
    if ((rc = ctx_new(&c, m, &cp)))
        goto fail;
    ctx_set_ffn_hook(c, rec_hook, r);

    int32_t train_done = 0, held_done = 0;
    for (int64_t i = 0; i < need; i++) {
        /* Chunks spread evenly over the text; every (need / n_held_chunks)-th one is held out. */
        const int64_t k = i * avail / need;
        const bool held = (i + 1) * n_held_chunks / need > i * n_held_chunks / need;
        int32_t n;
        if (held) {
            n = n_held - held_done < chunk ? n_held - held_done : chunk;
            r->row_base = r->n_train + held_done;
            held_done += n;
        } else {
            n = r->n_train - train_done < chunk ? r->n_train - train_done : chunk;
            r->row_base = train_done;
            train_done += n;
        }
        if (n <= 0)
            continue;
        r->row_end = r->row_base + n;
        const int32_t *src = toks + (size_t)k * (size_t)text_per_chunk;
        if (bos) {
            buf[0] = tok_bos(m->tok);
            memcpy(buf + 1, src, (size_t)(n - 1) * sizeof *buf);
        } else {
            memcpy(buf, src, (size_t)n * sizeof *buf);
        }
        if ((rc = ctx_eval(c, buf, n, 0, NULL, false)))
            goto fail;
        prog_update(prog, (uint64_t)(train_done + held_done), (uint64_t)r->n_rows);
    }
    if (train_done != r->n_train || held_done != n_held) {
        rc = pi_fail(PI_E_RANGE, "calibrate: recorded %d + %d tokens, expected %d + %d", train_done, held_done,
                     r->n_train, n_held);
        goto fail;
    }
fail:
    ctx_free(c);
    free(buf);
    return rc;
}
