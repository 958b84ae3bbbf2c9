/* pwri_write.c — the PowerInfer GGUF (magic PWRI): the source model's keys and tensors, with each
 * layer's down projection stored transposed (blk.N.ffn_down_t.weight, ne {n_embd, n_ff}: row i is
 * neuron i's output column, so a sparse FFN reads only the rows of active neurons), plus the
 * predictors (blk.N.fc1.weight ne {n_embd, r}, blk.N.fc2.weight ne {r, n_ff}) and the activation
 * frequencies (blk.N.act_freq, F32 [n_ff]). Streamed: one tensor in memory at a time. */
#include "cal_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "pi_err.h"
#include "quant.h"

#define PWRI_NAME_MAX 96

int pwri_down_t_type(uint32_t src_type, int64_t n_embd, uint32_t *out_type, bool *exact)
{
    switch (src_type) {
    case PI_TYPE_F32:
    case PI_TYPE_F16:
    case PI_TYPE_BF16:
        *out_type = src_type;
        *exact = true;
        return 0;
    case PI_TYPE_Q8_0:
    case PI_TYPE_Q4_0:
        /* The transposed rows are n_embd long; block quants need whole blocks per row. */
        *out_type = n_embd % quant_traits(src_type)->blck_size == 0 ? src_type : PI_TYPE_F16;
        *exact = false;
        return 0;
    default: {
        const struct pi_type_traits *tr = quant_traits(src_type);
        return pi_fail(PI_E_UNSUPPORTED, "calibrate: ffn_down of type %s cannot be transposed (f32, f16, bf16, q8_0, "
                       "q4_0 can)", tr ? tr->name : "unknown");
    }
    }
}

/* Layer of a "blk.N.ffn_down.weight" name, or -1. */
static int down_layer(const char *name)
{
    int layer, end = 0;
    if (sscanf(name, "blk.%d.ffn_down.weight%n", &layer, &end) == 1 && name[end] == '\0' && layer >= 0)
        return layer;
    return -1;
}

/* dst (n_ff rows of n_embd) = transpose of src (n_embd rows of n_ff), element bytes esz: exact. */
static void transpose_bytes(uint8_t *dst, const uint8_t *src, int64_t n_embd, int64_t n_ff, size_t esz)
{
    for (int64_t e = 0; e < n_embd; e++)
        for (int64_t i = 0; i < n_ff; i++)
            memcpy(dst + ((size_t)i * (size_t)n_embd + (size_t)e) * esz, src + ((size_t)e * (size_t)n_ff + (size_t)i) * esz,
                   esz);
}

/* ffn_down_t of a block-quantized ffn_down: dequantize, transpose, quantize rows of n_embd. */
static int transpose_quant(void *dst, uint32_t dst_type, const struct gguf_tensor *src, int64_t n_embd, int64_t n_ff)
{
    const struct pi_type_traits *st = quant_traits(src->type), *dt = quant_traits(dst_type);
    const size_t src_row = quant_row_size(src->type, n_ff), dst_row = quant_row_size(dst_type, n_embd);
    float *full = malloc((size_t)n_embd * (size_t)n_ff * sizeof(float));
    float *row = malloc((size_t)n_embd * sizeof(float));
    if (!full || !row) {
        free(full);
        free(row);
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory transposing %s", src->name);
    }
    for (int64_t e = 0; e < n_embd; e++)
        st->to_float((const uint8_t *)src->data + (size_t)e * src_row, full + (size_t)e * (size_t)n_ff, n_ff);
    for (int64_t i = 0; i < n_ff; i++) {
        for (int64_t e = 0; e < n_embd; e++)
            row[e] = full[(size_t)e * (size_t)n_ff + (size_t)i];
        uint8_t *d = (uint8_t *)dst + (size_t)i * dst_row;
        if (dst_type == PI_TYPE_F16) {
            for (int64_t e = 0; e < n_embd; e++) {
                pi_f16 h = pi_f32_to_f16(row[e]);
                memcpy(d + 2 * e, &h, sizeof h);
            }
        } else {
            dt->from_float(row, d, n_embd);
        }
    }
    free(full);
    free(row);
    return 0;
}

/* n f32 values stored as `type` (F32 copy or F16 round-to-nearest-even). */
static void store_floats(void *dst, uint32_t type, const float *src, size_t n)
{
    if (type == PI_TYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        pi_f16 h = pi_f32_to_f16(src[i]);
        memcpy((uint8_t *)dst + 2 * i, &h, sizeof h);
    }
}

static int set_keys(struct gguf_writer *w, const struct gguf_file *src, int32_t n_layer, const struct pwri_layer *L,
                    const struct pwri_params *pp)
{
    int rc;
    uint32_t *ranks = malloc((size_t)n_layer * sizeof *ranks);
    if (!ranks)
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory");
    for (int32_t l = 0; l < n_layer; l++)
        ranks[l] = (uint32_t)L[l].pred->rank;
    if ((rc = gguf_writer_copy_kv(w, src)) ||
        (rc = gguf_writer_set_f32(w, "powerinfer.sparse_threshold", pp->threshold)) ||
        (rc = gguf_writer_set_u32(w, "pinfer.calibration.tokens", pp->tokens_train)) ||
        (rc = gguf_writer_set_u32(w, "pinfer.calibration.heldout_tokens", pp->tokens_heldout)) ||
        (rc = gguf_writer_set_str(w, "pinfer.calibration.data", pp->data_names ? pp->data_names : "")) ||
        (rc = gguf_writer_set_f32(w, "pinfer.calibration.recall_target", pp->recall_target)) ||
        (rc = gguf_writer_set_arr(w, "pinfer.calibration.rank", GGUF_TYPE_UINT32, ranks, (size_t)n_layer)) ||
        (pp->layer_recall &&
         (rc = gguf_writer_set_arr(w, "pinfer.calibration.recall", GGUF_TYPE_FLOAT32, pp->layer_recall, (size_t)n_layer))))
        goto out;
out:
    free(ranks);
    return rc;
}

/* Declare every output tensor (in write order): the source's, ffn_down replaced in place, then per
 * layer fc1, fc2, act_freq. */
static int declare_tensors(struct gguf_writer *w, const struct gguf_file *src, int32_t n_layer, int32_t n_embd,
                           int32_t n_ff, const struct pwri_layer *L, uint32_t pred_type, int *n_down)
{
    int rc;
    char name[PWRI_NAME_MAX];
    *n_down = 0;
    for (size_t i = 0; i < gguf_n_tensors(src); i++) {
        const struct gguf_tensor *t = gguf_tensor(src, i);
        const int layer = down_layer(t->name);
        if (layer < 0) {
            if ((rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL)))
                return rc;
            continue;
        }
        if (layer >= n_layer || t->n_dims != 2 || t->ne[0] != n_ff || t->ne[1] != n_embd)
            return pi_fail(PI_E_TYPE, "calibrate: %s has shape [%lld, %lld], expected [%d, %d] of layer < %d", t->name,
                           (long long)t->ne[0], (long long)t->ne[1], n_ff, n_embd, n_layer);
        uint32_t type;
        bool exact;
        if ((rc = pwri_down_t_type(t->type, n_embd, &type, &exact)))
            return rc;
        const int64_t ne[2] = { n_embd, n_ff };
        snprintf(name, sizeof name, "blk.%d.ffn_down_t.weight", layer);
        if ((rc = gguf_writer_add_tensor(w, name, type, 2, ne, NULL)))
            return rc;
        (*n_down)++;
    }
    if (*n_down != n_layer)
        return pi_fail(PI_E_NOTFOUND, "calibrate: the model has %d ffn_down tensors for %d layers", *n_down, n_layer);
    for (int32_t l = 0; l < n_layer; l++) {
        const int64_t r = L[l].pred->rank;
        const int64_t ne1[2] = { n_embd, r }, ne2[2] = { r, n_ff }, nef[1] = { n_ff };
        snprintf(name, sizeof name, "blk.%d.fc1.weight", l);
        if ((rc = gguf_writer_add_tensor(w, name, pred_type, 2, ne1, NULL)))
            return rc;
        snprintf(name, sizeof name, "blk.%d.fc2.weight", l);
        if ((rc = gguf_writer_add_tensor(w, name, pred_type, 2, ne2, NULL)))
            return rc;
        snprintf(name, sizeof name, "blk.%d.act_freq", l);
        if ((rc = gguf_writer_add_tensor(w, name, PI_TYPE_F32, 1, nef, NULL)))
            return rc;
    }
    return 0;
}

/* Write the tensors in declaration order (see declare_tensors). */
static int write_tensors(struct gguf_writer *w, const struct gguf_file *src, int32_t n_layer, int32_t n_embd,
                         int32_t n_ff, const struct pwri_layer *L, uint32_t pred_type, struct cal_progress *prog)
{
    int rc = 0;
    const size_t n_src = gguf_n_tensors(src), total = n_src + 3 * (size_t)n_layer;
    void *buf = NULL;
    for (size_t i = 0; i < n_src; i++) {
        const struct gguf_tensor *t = gguf_tensor(src, i);
        if (down_layer(t->name) < 0) {
            if ((rc = gguf_writer_write_tensor(w, t->data)))
                goto fail;
        } else {
            uint32_t type;
            bool exact;
            if ((rc = pwri_down_t_type(t->type, n_embd, &type, &exact)))
                goto fail;
            buf = malloc(quant_row_size(type, n_embd) * (size_t)n_ff);
            if (!buf) {
                rc = pi_fail(PI_E_NOMEM, "calibrate: out of memory for %s", t->name);
                goto fail;
            }
            if (exact)
                transpose_bytes(buf, t->data, n_embd, n_ff, quant_traits(t->type)->type_size);
            else if ((rc = transpose_quant(buf, type, t, n_embd, n_ff)))
                goto fail;
            if ((rc = gguf_writer_write_tensor(w, buf)))
                goto fail;
            free(buf);
            buf = NULL;
        }
        prog_update(prog, i + 1, total);
    }
    const size_t esz = pred_type == PI_TYPE_F32 ? sizeof(float) : sizeof(pi_f16);
    for (int32_t l = 0; l < n_layer; l++) {
        const struct cal_pred *p = L[l].pred;
        const size_t n1 = (size_t)p->rank * (size_t)n_embd, n2 = (size_t)n_ff * (size_t)p->rank;
        buf = malloc((n1 > n2 ? n1 : n2) * esz);
        if (!buf) {
            rc = pi_fail(PI_E_NOMEM, "calibrate: out of memory for layer %d's predictor", l);
            goto fail;
        }
        store_floats(buf, pred_type, p->w1, n1);
        if ((rc = gguf_writer_write_tensor(w, buf)))
            goto fail;
        store_floats(buf, pred_type, p->w2, n2);
        if ((rc = gguf_writer_write_tensor(w, buf)) || (rc = gguf_writer_write_tensor(w, L[l].act_freq)))
            goto fail;
        free(buf);
        buf = NULL;
        prog_update(prog, n_src + 3 * (size_t)l + 3, total);
    }
fail:
    free(buf);
    return rc;
}

int pwri_write(const char *path, const struct gguf_file *src, int32_t n_layer, int32_t n_embd, int32_t n_ff,
               const struct pwri_layer *layers, const struct pwri_params *pp, struct cal_progress *prog)
{
    if (pp->pred_type != PI_TYPE_F16 && pp->pred_type != PI_TYPE_F32)
        return pi_fail(PI_E_INVAL, "calibrate: predictors are stored as f16 or f32");
    struct gguf_writer *w = NULL;
    int n_down, rc;
    if ((rc = gguf_writer_new(&w, GGUF_MAGIC_PWRI)) || (rc = set_keys(w, src, n_layer, layers, pp)) ||
        (rc = declare_tensors(w, src, n_layer, n_embd, n_ff, layers, pp->pred_type, &n_down)) ||
        (rc = gguf_writer_open(w, path)) ||
        (rc = write_tensors(w, src, n_layer, n_embd, n_ff, layers, pp->pred_type, prog)) ||
        (rc = gguf_writer_close(w)))
        goto fail;
fail:
    gguf_writer_free(w);
    return rc;
}
