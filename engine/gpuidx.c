/* gpuidx.c — PowerInfer's *.generated.gpuidx files (see gpuidx.h). */
#include "gpuidx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "pi_err.h"
#include "quant.h"
#include "split.h"

#define TENSORS_PER_LAYER 2 /* gpu_idx, gpu_bucket */
#define TENSOR_NAME_CAP 64

static void idx_name(char *out, int il) { snprintf(out, TENSOR_NAME_CAP, "blk.%d.gpu_idx", il); }
static void bucket_name(char *out, int il) { snprintf(out, TENSOR_NAME_CAP, "blk.%d.gpu_bucket", il); }

int gpuidx_write(const char *path, int32_t n_layer, int64_t n_ff, const uint8_t *gpu_idx, uint64_t vram_capacity)
{
    if (n_layer <= 0 || n_ff <= 0 || n_ff > INT32_MAX)
        return pi_fail(PI_E_INVAL, "gpuidx: cannot write %d layers of %lld neurons", n_layer, (long long)n_ff);
    struct gguf_writer *w = NULL;
    int64_t *count = calloc((size_t)n_layer, sizeof *count);
    int32_t *buf = malloc((size_t)n_ff * sizeof *buf);
    char name[TENSOR_NAME_CAP];
    int rc;
    if (!count || !buf) {
        rc = pi_fail(PI_E_NOMEM, "gpuidx: out of memory");
        goto fail;
    }
    for (int il = 0; il < n_layer; il++)
        for (int64_t i = 0; i < n_ff; i++)
            count[il] += gpu_idx[(int64_t)il * n_ff + i] != 0;
    if ((rc = gguf_writer_new(&w, GGUF_MAGIC_PWRI)) ||
        (rc = gguf_writer_set_str(w, "general.architecture", GPUIDX_ARCH)) ||
        (rc = gguf_writer_set_u32(w, GPUIDX_KEY_BLOCKS, (uint32_t)n_layer)) ||
        (rc = gguf_writer_set_u64(w, GPUIDX_KEY_CAPACITY, vram_capacity)))
        goto fail;
    for (int il = 0; il < n_layer; il++) {
        const int64_t ne_idx = n_ff, ne_bucket = count[il]; /* 0 for a layer without GPU neurons, as PowerInfer */
        idx_name(name, il);
        if ((rc = gguf_writer_add_tensor(w, name, PI_TYPE_I32, 1, &ne_idx, NULL)))
            goto fail;
        bucket_name(name, il);
        if ((rc = gguf_writer_add_tensor(w, name, PI_TYPE_I32, 1, &ne_bucket, NULL)))
            goto fail;
    }
    if ((rc = gguf_writer_open(w, path)))
        goto fail;
    for (int il = 0; il < n_layer; il++) {
        const uint8_t *g = gpu_idx + (int64_t)il * n_ff;
        for (int64_t i = 0; i < n_ff; i++)
            buf[i] = g[i] != 0;
        if ((rc = gguf_writer_write_tensor(w, buf)))
            goto fail;
        int64_t k = 0;
        for (int64_t i = 0; i < n_ff; i++)
            if (g[i])
                buf[k++] = (int32_t)i;
        if ((rc = gguf_writer_write_tensor(w, buf)))
            goto fail;
    }
    rc = gguf_writer_close(w);
fail:
    gguf_writer_free(w);
    free(count);
    free(buf);
    return rc;
}

/* Tensor i must be named want, I32, one-dimensional. */
static int check_tensor(const struct gguf_file *f, const char *path, size_t i, const char *want,
                        const struct gguf_tensor **out)
{
    const struct gguf_tensor *t = gguf_tensor(f, i);
    if (strcmp(t->name, want) != 0)
        return pi_fail(PI_E_FORMAT, "gpuidx: '%s': tensor #%zu is '%s', expected '%s'", path, i, t->name, want);
    if (t->type != PI_TYPE_I32)
        return pi_fail(PI_E_FORMAT, "gpuidx: '%s': tensor '%s' has type %u, expected i32", path, want, t->type);
    if (t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return pi_fail(PI_E_FORMAT, "gpuidx: '%s': tensor '%s' has shape [%lld, %lld, %lld, %lld], expected one "
                       "dimension", path, want, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3]);
    *out = t;
    return 0;
}

static int32_t i32_at(const struct gguf_tensor *t, int64_t i)
{
    int32_t v; /* the data section may be aligned to less than 4 (general.alignment) */
    memcpy(&v, (const char *)t->data + (size_t)i * sizeof v, sizeof v);
    return v;
}

/* One layer: gpu_idx values 0/1, its bucket the ascending list of its ones. */
static int read_layer(const struct gguf_file *f, const char *path, int il, int64_t n_ff, uint8_t *g)
{
    char name[TENSOR_NAME_CAP];
    const struct gguf_tensor *ti, *tb;
    int rc;
    idx_name(name, il);
    if ((rc = check_tensor(f, path, (size_t)il * TENSORS_PER_LAYER, name, &ti)))
        return rc;
    if (ti->ne[0] != n_ff)
        return pi_fail(PI_E_RANGE, "gpuidx: '%s': '%s' has %lld neurons but the model's layers have %lld", path,
                       name, (long long)ti->ne[0], (long long)n_ff);
    int64_t ones = 0;
    for (int64_t i = 0; i < n_ff; i++) {
        const int32_t v = i32_at(ti, i);
        if (v != 0 && v != 1)
            return pi_fail(PI_E_FORMAT, "gpuidx: '%s': %s[%lld] = %d (must be 0 or 1)", path, name, (long long)i, v);
        g[i] = (uint8_t)v;
        ones += v;
    }
    bucket_name(name, il);
    if ((rc = check_tensor(f, path, (size_t)il * TENSORS_PER_LAYER + 1, name, &tb)))
        return rc;
    const int64_t nb = tb->ne[0];
    if (ones == 0) {
        /* PowerInfer ignores the bucket here: 0 elements (what it and we write) or 1 (older pinfer files) */
        if (nb > 1 || (nb == 1 && (i32_at(tb, 0) < 0 || i32_at(tb, 0) >= n_ff)))
            return pi_fail(PI_E_FORMAT, "gpuidx: '%s': layer %d has no GPU neuron but its bucket has %lld", path,
                           il, (long long)nb);
        return 0;
    }
    if (nb != ones)
        return pi_fail(PI_E_FORMAT, "gpuidx: '%s': '%s' lists %lld neurons but blk.%d.gpu_idx has %lld ones", path,
                       name, (long long)nb, il, (long long)ones);
    for (int64_t k = 0; k < nb; k++) {
        const int32_t v = i32_at(tb, k);
        if (v < 0 || v >= n_ff || g[v] != 1 || (k > 0 && v <= i32_at(tb, k - 1)))
            return pi_fail(PI_E_FORMAT, "gpuidx: '%s': %s[%lld] = %d is not an ascending GPU neuron of gpu_idx",
                           path, name, (long long)k, v);
    }
    return 0;
}

int gpuidx_read(const char *path, int32_t n_layer, int64_t n_ff, uint8_t *gpu_idx, uint64_t *vram_capacity)
{
    struct gguf_file *f = NULL;
    int rc = gguf_open(&f, path);
    if (rc)
        return rc;
    const char *arch = NULL;
    uint32_t blocks = 0;
    uint64_t cap = 0;
    if (!gguf_is_powerinfer(f) || gguf_version(f) != GPUIDX_VERSION) {
        rc = pi_fail(PI_E_FORMAT, "gpuidx: '%s' has magic %08x version %u, expected PWRI version %d", path,
                     gguf_magic(f), gguf_version(f), GPUIDX_VERSION);
        goto out;
    }
    if (gguf_get_str(f, "general.architecture", &arch) != 0 || strcmp(arch, GPUIDX_ARCH) != 0) {
        rc = pi_fail(PI_E_FORMAT, "gpuidx: '%s' has general.architecture '%s', expected '%s'", path,
                     arch ? arch : "(missing)", GPUIDX_ARCH);
        goto out;
    }
    if ((rc = gguf_get_u32(f, GPUIDX_KEY_BLOCKS, &blocks)) || (rc = gguf_get_u64(f, GPUIDX_KEY_CAPACITY, &cap))) {
        if (rc == -PI_E_NOTFOUND)
            rc = pi_fail(PI_E_FORMAT, "gpuidx: '%s' lacks '%s' or '%s'", path, GPUIDX_KEY_BLOCKS, GPUIDX_KEY_CAPACITY);
        goto out;
    }
    if (blocks != (uint32_t)n_layer) {
        rc = pi_fail(PI_E_RANGE, "gpuidx: '%s' is for %u layers but the model has %d", path, blocks, n_layer);
        goto out;
    }
    if (gguf_n_tensors(f) != (size_t)n_layer * TENSORS_PER_LAYER) {
        rc = pi_fail(PI_E_FORMAT, "gpuidx: '%s' has %zu tensors, expected %d (gpu_idx and gpu_bucket per layer)",
                     path, gguf_n_tensors(f), n_layer * TENSORS_PER_LAYER);
        goto out;
    }
    for (int il = 0; il < n_layer; il++)
        if ((rc = read_layer(f, path, il, n_ff, gpu_idx + (int64_t)il * n_ff)))
            goto out;
    if (vram_capacity)
        *vram_capacity = cap;
out:
    gguf_close(f);
    return rc;
}

int gpuidx_path(const char *model_path, const char *dir, char *out, size_t cap)
{
    int n;
    if (dir) {
        const char *base = strrchr(model_path, '/');
        n = snprintf(out, cap, "%s/%s%s", dir, base ? base + 1 : model_path, GPUIDX_SUFFIX);
    } else {
        n = snprintf(out, cap, "%s%s", model_path, GPUIDX_SUFFIX);
    }
    if (n < 0 || (size_t)n >= cap)
        return pi_fail(PI_E_RANGE, "gpuidx: path for '%s' is longer than %zu bytes", model_path, cap);
    return 0;
}

int gpuidx_load_matching(const char *path, const struct pi_model *m, uint64_t budget, uint8_t *gpu_idx)
{
    uint64_t cap = 0;
    int rc = gpuidx_read(path, m->hp.n_layer, m->hp.n_ff, gpu_idx, &cap);
    if (rc)
        return rc;
    if (cap != budget)
        return pi_fail(PI_E_RANGE, "gpuidx: '%s' was made for a budget of %llu bytes, not %llu", path,
                       (unsigned long long)cap, (unsigned long long)budget);
    return 0;
}

static bool try_load(const char *path, const struct pi_model *m, uint64_t budget, uint8_t *gpu_idx)
{
    return access(path, F_OK) == 0 && gpuidx_load_matching(path, m, budget, gpu_idx) == 0;
}

/* a system error (-errno, below the PI_E_* range): the directory is read-only, full, or in the way */
static bool write_failed_here(int rc) { return rc < 0 && -rc < PI_E_FORMAT; }

int gpuidx_load_or_make(const char *model_path, const char *fallback_dir, const struct pi_model *m,
                        const struct vram_params *vp,
                        uint64_t budget, bool reset, uint8_t *gpu_idx, char *path_out, size_t cap,
                        bool *generated)
{
    char alt[4096];
    int rc;
    if (generated)
        *generated = false;
    if ((rc = gpuidx_path(model_path, NULL, path_out, cap)) ||
        (fallback_dir && (rc = gpuidx_path(model_path, fallback_dir, alt, sizeof alt))))
        return rc;
    if (!reset && try_load(path_out, m, budget, gpu_idx))
        return 0;
    if (!reset && fallback_dir && try_load(alt, m, budget, gpu_idx)) {
        if (strlen(alt) >= cap)
            return pi_fail(PI_E_RANGE, "gpuidx: path '%s' is longer than %zu bytes", alt, cap);
        strcpy(path_out, alt);
        return 0;
    }
    if ((rc = split_solve(m, vp, budget, gpu_idx, NULL)))
        return rc;
    rc = gpuidx_write(path_out, m->hp.n_layer, m->hp.n_ff, gpu_idx, budget);
    if (write_failed_here(rc) && fallback_dir) {
        if (strlen(alt) >= cap)
            return pi_fail(PI_E_RANGE, "gpuidx: path '%s' is longer than %zu bytes", alt, cap);
        strcpy(path_out, alt);
        rc = gpuidx_write(path_out, m->hp.n_layer, m->hp.n_ff, gpu_idx, budget);
    }
    if (rc == 0 && generated)
        *generated = true;
    return rc;
}
