/* quantize.c — the run of `pictl quantize`: read IN (mmap), plan the types (plan.c), print the plan,
 * then stream the tensors into OUT: every key copied (general.file_type set to the mixture's),
 * the magic kept (PWRI stays PWRI), each tensor converted row by row (its type -> f32 -> the new
 * type, the rows spread over threads) or copied when its type does not change. */
#include "quantize.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "pi_err.h"
#include "quant.h"
#include "threadpool.h"

#define QZ_QUANT_VERSION 2 /* general.quantization_version: ggml's current block layouts */
#define QZ_MIB (1024.0 * 1024.0)
#define QZ_BAR_WIDTH 30
#define QZ_KEY_MAX 128
/* Slices of a tensor's rows per thread, claimed by whichever thread is free: a tensor is one long
 * job, and with one slice a thread the whole job waits for the slowest thread (and a worker that
 * takes the caller's slice looks like a straggler to the pool, which then runs alone). Rows are
 * independent, so the bytes do not depend on the split. */
#define QZ_SLICES_PER_THREAD 4

/* one tensor's conversion, split by rows over the pool */
struct qz_job {
    const struct pi_type_traits *src, *dst;
    const uint8_t *in;
    uint8_t *out;
    size_t in_row, out_row;
    int64_t n_per_row, n_rows;
    float *scratch;        /* a row of f32 per slice */
};

static void qz_rows(void *arg, int ith, int nth)
{
    const struct qz_job *j = arg;
    float *row = j->scratch + (size_t)ith * (size_t)j->n_per_row;
    const int64_t r0 = j->n_rows * ith / nth, r1 = j->n_rows * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r++) {
        j->src->to_float(j->in + (size_t)r * j->in_row, row, j->n_per_row);
        j->dst->from_float(row, j->out + (size_t)r * j->out_row, j->n_per_row);
    }
}

static int qz_model_info(const struct gguf_file *f, struct qz_model *m)
{
    memset(m, 0, sizeof *m);
    m->powerinfer = gguf_is_powerinfer(f);
    if (gguf_get_str(f, "general.architecture", &m->arch))
        return pi_fail(PI_E_FORMAT, "quantize: no general.architecture");
    char key[QZ_KEY_MAX];
    uint32_t v;
    snprintf(key, sizeof key, "%s.block_count", m->arch);
    if (gguf_get_u32(f, key, &v))
        return pi_fail(PI_E_FORMAT, "quantize: no %s", key);
    m->n_layer = (int32_t)v;
    snprintf(key, sizeof key, "%s.attention.head_count", m->arch);
    m->n_head = gguf_get_u32(f, key, &v) == 0 ? (int32_t)v : 0;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch);
    m->n_head_kv = gguf_get_u32(f, key, &v) == 0 ? (int32_t)v : m->n_head;
    return 0;
}

static size_t qz_nbytes(uint32_t type, const int64_t ne[4])
{
    return quant_row_size(type, ne[0]) * (size_t)(ne[1] * ne[2] * ne[3]);
}

static void qz_shape(char *buf, size_t cap, const struct gguf_tensor *t)
{
    int at = snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->n_dims && at < (int)cap; d++)
        at += snprintf(buf + at, cap - (size_t)at, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (at < (int)cap)
        snprintf(buf + at, cap - (size_t)at, "]");
}

static void qz_bar(FILE *f, size_t done, size_t total)
{
    const int fill = total ? (int)((double)done / (double)total * QZ_BAR_WIDTH) : QZ_BAR_WIDTH;
    fprintf(f, "\r[");
    for (int i = 0; i < QZ_BAR_WIDTH; i++)
        fputc(i < fill ? '#' : '.', f);
    fprintf(f, "] %3.0f%%", total ? 100.0 * (double)done / (double)total : 100.0);
    fflush(f);
}

int qz_run(const struct qz_opts *o)
{
    struct gguf_file *f = NULL;
    struct gguf_writer *w = NULL;
    struct pi_pool *pool = NULL;
    struct qz_tensor *ts = NULL;
    uint32_t *types = NULL;
    bool *fell = NULL;
    float *scratch = NULL;
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    int rc;
    const int nth = o->n_threads > 0 ? o->n_threads : 1;

    /* the writer renames OUT.tmp over OUT: with OUT the input, the model would be replaced */
    if (!o->dry_run && (rc = gguf_check_not_input(o->out, o->in, "the input model")))
        goto out;
    if ((rc = gguf_open(&f, o->in)))
        goto out;
    struct qz_model m;
    if ((rc = qz_model_info(f, &m)))
        goto out;
    const size_t n = gguf_n_tensors(f);
    ts = calloc(n ? n : 1, sizeof *ts);
    types = calloc(n ? n : 1, sizeof *types);
    fell = calloc(n ? n : 1, sizeof *fell);
    if (!ts || !types || !fell) {
        rc = pi_fail(PI_E_NOMEM, "quantize: %zu tensors", n);
        goto out;
    }
    int64_t max_row = 1;
    for (size_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        ts[i] = (struct qz_tensor){ t->name, t->n_dims, { t->ne[0], t->ne[1], t->ne[2], t->ne[3] }, t->type };
        if (t->ne[0] > max_row)
            max_row = t->ne[0];
    }
    if ((rc = qz_plan(&o->params, &m, ts, n, types, fell)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct pi_type_traits *st = quant_traits(ts[i].type), *dt = quant_traits(types[i]);
        if (types[i] != ts[i].type && (!st || !st->to_float || !dt || !dt->from_float)) {
            rc = pi_fail(PI_E_UNSUPPORTED, "quantize: tensor '%s': no conversion from %s to %s", ts[i].name,
                         st ? st->name : "?", dt ? dt->name : "?");
            goto out;
        }
    }

    if (!o->dry_run) {
        if ((rc = gguf_writer_new(&w, gguf_magic(f))) || (rc = gguf_writer_copy_kv(w, f)) ||
            (rc = gguf_writer_set_u32(w, "general.file_type", o->params.mix->ftype)) ||
            (rc = gguf_writer_set_u32(w, "general.quantization_version", QZ_QUANT_VERSION)))
            goto out;
        for (size_t i = 0; i < n; i++)
            if ((rc = gguf_writer_add_tensor(w, ts[i].name, types[i], ts[i].n_dims, ts[i].ne, NULL)))
                goto out;
        if ((rc = gguf_writer_open(w, o->out)))
            goto out;
        if ((rc = pool_new(&pool, nth)))
            goto out;
        scratch = malloc((size_t)nth * QZ_SLICES_PER_THREAD * (size_t)max_row * sizeof *scratch);
        if (!scratch) {
            rc = pi_fail(PI_E_NOMEM, "quantize: row buffers");
            goto out;
        }
    }

    size_t total_in = 0, total_out = 0, n_fallback = 0, n_converted = 0;
    double n_elements = 0;
    for (size_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        const size_t out_bytes = qz_nbytes(types[i], ts[i].ne);
        total_in += t->nbytes;
        n_elements += (double)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        total_out += out_bytes;
        n_fallback += fell[i];
        if (o->log) {
            char shape[96];
            qz_shape(shape, sizeof shape, t);
            if (o->progress)
                fputc('\r', o->log);
            fprintf(o->log, "[%4zu/%4zu] %-36s - %-18s type = %6s", i + 1, n, t->name, shape,
                    quant_traits(t->type) ? quant_traits(t->type)->name : "?");
            if (types[i] != t->type)
                fprintf(o->log, ", %s %6s%s .. size = %8.2f MiB -> %8.2f MiB\n", o->dry_run ? "plan" : "converting to",
                        quant_traits(types[i])->name, fell[i] ? " (fallback: row length)" : "",
                        (double)t->nbytes / QZ_MIB, (double)out_bytes / QZ_MIB);
            else
                fprintf(o->log, ", size = %8.3f MiB\n", (double)t->nbytes / QZ_MIB);
        }
        if (o->dry_run)
            continue;
        const void *data = t->data;
        if (types[i] != t->type) {
            if (out_bytes > buf_cap) {
                free(buf);
                buf_cap = out_bytes;
                if (!(buf = malloc(buf_cap))) {
                    rc = pi_fail(PI_E_NOMEM, "quantize: %zu bytes for '%s'", out_bytes, t->name);
                    goto out;
                }
            }
            struct qz_job j = { quant_traits(t->type), quant_traits(types[i]), t->data, buf,
                                quant_row_size(t->type, t->ne[0]), quant_row_size(types[i], t->ne[0]), t->ne[0],
                                t->ne[1] * t->ne[2] * t->ne[3], scratch };
            const int64_t max_slices = (int64_t)nth * QZ_SLICES_PER_THREAD;
            pool_run_n(pool, qz_rows, &j, (int)(j.n_rows < max_slices ? (j.n_rows > 0 ? j.n_rows : 1) : max_slices));
            data = buf;
            n_converted++;
        }
        if ((rc = gguf_writer_write_tensor(w, data)))
            goto out;
        if (o->progress && o->log)
            qz_bar(o->log, i + 1, n);
    }
    if (!o->dry_run && (rc = gguf_writer_close(w)))
        goto out;
    if (o->log) {
        if (o->progress)
            fputc('\n', o->log);
        fprintf(o->log, "quantize: %s%s: %zu tensors, %.2f MiB -> %.2f MiB (%.2f bits per weight), %zu converted, "
                "%zu fallbacks%s\n", o->params.mix->name, m.powerinfer ? " (PowerInfer)" : "", n,
                (double)total_in / QZ_MIB, (double)total_out / QZ_MIB,
                n_elements > 0 ? 8.0 * (double)total_out / n_elements : 0.0, o->dry_run ? (size_t)0 : n_converted,
                n_fallback, o->dry_run ? " (dry run: nothing written)" : "");
    }
    rc = 0;
out:
    free(buf);
    free(scratch);
    pool_free(pool);
    gguf_writer_free(w);
    free(ts);
    free(types);
    free(fell);
    gguf_close(f);
    return rc;
}
