/* safetensors.c — mmap'd safetensors reader with every header field validated (see safetensors.h). */
#include "safetensors.h"

#include "pi_err.h"
#include "quant.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The u64 that precedes the JSON header. */
#define ST_LEN_BYTES 8
/* The reference implementation refuses headers above 100 MB; a larger one is a corrupt length. */
#define ST_MAX_HEADER (100u * 1000u * 1000u)
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

struct st_file {
    char *path;
    void *map;
    size_t size;
};

struct st_set {
    struct st_file *files;
    size_t n_files;
    struct st_tensor *tensors;
    size_t n_tensors, cap_tensors;
};

size_t st_dtype_size(enum st_dtype t)
{
    return t == ST_F32 ? sizeof(float) : sizeof(uint16_t);
}

const char *st_dtype_name(enum st_dtype t)
{
    switch (t) {
    case ST_F32: return "F32";
    case ST_F16: return "F16";
    case ST_BF16: return "BF16";
    }
    return "?";
}

static int st_dtype_parse(const char *s, enum st_dtype *out)
{
    if (!strcmp(s, "F32")) *out = ST_F32;
    else if (!strcmp(s, "F16")) *out = ST_F16;
    else if (!strcmp(s, "BF16")) *out = ST_BF16;
    else return -1;
    return 0;
}

static int st_push_tensor(struct st_set *s, struct st_tensor *t)
{
    if (s->n_tensors == s->cap_tensors) {
        size_t cap = s->cap_tensors ? 2 * s->cap_tensors : 64;
        struct st_tensor *p = realloc(s->tensors, cap * sizeof *p);
        if (!p) return pi_fail(PI_E_NOMEM, "safetensors: out of memory for the tensor table");
        s->tensors = p;
        s->cap_tensors = cap;
    }
    s->tensors[s->n_tensors++] = *t;
    return 0;
}

/* An integer JSON value that is >= 0, or -1. */
static int64_t st_json_nonneg(const json_t *v)
{
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (int64_t)x;
}

/* Parse one header entry {dtype, shape, data_offsets} of file f into a tensor. */
static int st_parse_entry(struct st_set *s, const struct st_file *f, const char *name, const json_t *e,
                          const uint8_t *data, size_t data_size)
{
    struct st_tensor t = { 0 };
    if (!json_is_object(e))
        return pi_fail(PI_E_FORMAT, "safetensors: %s: entry of tensor '%s' is not an object", f->path, name);

    const char *dt = json_string_value(json_object_get(e, "dtype"));
    if (!dt) return pi_fail(PI_E_FORMAT, "safetensors: %s: tensor '%s' has no dtype string", f->path, name);
    if (st_dtype_parse(dt, &t.dtype))
        return pi_fail(PI_E_UNSUPPORTED, "safetensors: %s: tensor '%s' has dtype %s (only F32, F16 and BF16 are supported)",
                       f->path, name, dt);

    const json_t *shape = json_object_get(e, "shape");
    if (!json_is_array(shape))
        return pi_fail(PI_E_FORMAT, "safetensors: %s: tensor '%s' has no shape array", f->path, name);
    size_t nd = json_array_size(shape);
    if (nd > ST_MAX_DIMS)
        return pi_fail(PI_E_UNSUPPORTED, "safetensors: %s: tensor '%s' has %zu dimensions (at most %d)", f->path, name,
                       nd, ST_MAX_DIMS);
    t.n_dims = (int)nd;
    t.n_elems = 1;
    for (size_t i = 0; i < nd; i++) {
        int64_t d = st_json_nonneg(json_array_get(shape, i));
        if (d < 0)
            return pi_fail(PI_E_FORMAT, "safetensors: %s: tensor '%s' shape[%zu] is not a non-negative integer", f->path,
                           name, i);
        t.shape[i] = d;
        if (__builtin_mul_overflow(t.n_elems, d, &t.n_elems))
            return pi_fail(PI_E_FORMAT, "safetensors: %s: tensor '%s' element count overflows", f->path, name);
    }

    const json_t *offs = json_object_get(e, "data_offsets");
    int64_t b = json_array_size(offs) == 2 ? st_json_nonneg(json_array_get(offs, 0)) : -1;
    int64_t en = json_array_size(offs) == 2 ? st_json_nonneg(json_array_get(offs, 1)) : -1;
    if (b < 0 || en < 0 || b > en)
        return pi_fail(PI_E_FORMAT, "safetensors: %s: tensor '%s' data_offsets is not [begin, end] with begin <= end",
                       f->path, name);
    if ((uint64_t)en > data_size)
        return pi_fail(PI_E_TRUNCATED, "safetensors: %s: tensor '%s' data_offsets [%lld, %lld] beyond the %zu data bytes",
                       f->path, name, (long long)b, (long long)en, data_size);
    int64_t want;
    if (__builtin_mul_overflow(t.n_elems, (int64_t)st_dtype_size(t.dtype), &want) || want != en - b)
        return pi_fail(PI_E_FORMAT, "safetensors: %s: tensor '%s' holds %lld bytes but %s x %lld elements need %lld",
                       f->path, name, (long long)(en - b), dt, (long long)t.n_elems, (long long)want);

    t.data = data + b;
    t.nbytes = (size_t)(en - b);
    t.file = f->path;
    t.name = strdup(name);
    if (!t.name) return pi_fail(PI_E_NOMEM, "safetensors: out of memory");
    int rc = st_push_tensor(s, &t);
    if (rc) free(t.name);
    return rc;
}

/* Map one file and append its tensors. */
static int st_load_file(struct st_set *s, const char *path)
{
    int rc, fd = -1;
    json_t *hdr = NULL;
    struct st_file *files = realloc(s->files, (s->n_files + 1) * sizeof *files);
    if (!files) return pi_fail(PI_E_NOMEM, "safetensors: out of memory");
    s->files = files;
    struct st_file *f = &files[s->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return pi_fail(PI_E_NOMEM, "safetensors: out of memory");
    s->n_files++; /* from here st_close releases it */

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = pi_fail(errno, "safetensors: cannot open %s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        rc = pi_fail(errno, "safetensors: cannot stat %s: %s", path, strerror(errno));
        goto fail;
    }
    if (st.st_size < ST_LEN_BYTES) {
        rc = pi_fail(PI_E_TRUNCATED, "safetensors: %s: %lld bytes, shorter than the header length field", path,
                     (long long)st.st_size);
        goto fail;
    }
    f->map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        rc = pi_fail(errno, "safetensors: cannot map %s: %s", path, strerror(errno));
        goto fail;
    }
    f->size = (size_t)st.st_size;

    const uint8_t *p = f->map;
    uint64_t hlen = 0;
    for (int i = 0; i < ST_LEN_BYTES; i++) hlen |= (uint64_t)p[i] << (8 * i);
    if (hlen > f->size - ST_LEN_BYTES) {
        rc = pi_fail(PI_E_TRUNCATED, "safetensors: %s: header length %llu beyond file size %zu", path,
                     (unsigned long long)hlen, f->size);
        goto fail;
    }
    if (hlen > ST_MAX_HEADER) {
        rc = pi_fail(PI_E_FORMAT, "safetensors: %s: header length %llu is implausible", path, (unsigned long long)hlen);
        goto fail;
    }
    json_error_t jerr;
    hdr = json_loadb((const char *)p + ST_LEN_BYTES, (size_t)hlen, 0, &jerr);
    if (!hdr || !json_is_object(hdr)) {
        rc = pi_fail(PI_E_FORMAT, "safetensors: %s: header is not a JSON object: %s", path,
                     hdr ? "wrong type" : jerr.text);
        goto fail;
    }
    const uint8_t *data = p + ST_LEN_BYTES + hlen;
    size_t data_size = f->size - ST_LEN_BYTES - (size_t)hlen;
    const char *key;
    json_t *val;
    json_object_foreach(hdr, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        if ((rc = st_parse_entry(s, f, key, val, data, data_size))) goto fail;
    }
    json_decref(hdr);
    close(fd);
    return 0;

fail:
    json_decref(hdr);
    if (fd >= 0) close(fd);
    return rc;
}

static int st_cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

/* Sort for st_find's binary search; a name in two shards is ambiguous. */
static int st_finish(struct st_set *s)
{
    if (s->n_tensors) qsort(s->tensors, s->n_tensors, sizeof *s->tensors, st_cmp_name);
    for (size_t i = 1; i < s->n_tensors; i++)
        if (!strcmp(s->tensors[i - 1].name, s->tensors[i].name))
            return pi_fail(PI_E_FORMAT, "safetensors: tensor '%s' appears twice (%s and %s)", s->tensors[i].name,
                           s->tensors[i - 1].file, s->tensors[i].file);
    return 0;
}

int st_open_file(struct st_set **out, const char *path)
{
    int rc;
    struct st_set *s = calloc(1, sizeof *s);
    if (!s) return pi_fail(PI_E_NOMEM, "safetensors: out of memory");
    if ((rc = st_load_file(s, path)) || (rc = st_finish(s))) goto fail;
    *out = s;
    return 0;
fail:
    st_close(s);
    return rc;
}

/* Has shard `name` been loaded already? */
static bool st_has_file(const struct st_set *s, const char *path)
{
    for (size_t i = 0; i < s->n_files; i++)
        if (!strcmp(s->files[i].path, path)) return true;
    return false;
}

static int st_open_index(struct st_set *s, const char *dir, const char *index_path)
{
    int rc;
    char *path = NULL;
    json_error_t jerr;
    json_t *idx = json_load_file(index_path, 0, &jerr);
    if (!idx) return pi_fail(PI_E_FORMAT, "safetensors: %s: %s (line %d)", index_path, jerr.text, jerr.line);
    const json_t *wm = json_object_get(idx, "weight_map");
    if (!json_is_object(wm) || !json_object_size(wm)) {
        rc = pi_fail(PI_E_FORMAT, "safetensors: %s: no weight_map object", index_path);
        goto fail;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)wm, key, val) {
        const char *shard = json_string_value(val);
        /* Shards live next to the index: a path separator would let the index point anywhere. */
        if (!shard || !*shard || strchr(shard, '/')) {
            rc = pi_fail(PI_E_FORMAT, "safetensors: %s: weight_map entry of '%s' is not a file name", index_path, key);
            goto fail;
        }
        free(path);
        if (asprintf(&path, "%s/%s", dir, shard) < 0) {
            path = NULL;
            rc = pi_fail(PI_E_NOMEM, "safetensors: out of memory");
            goto fail;
        }
        if (!st_has_file(s, path) && (rc = st_load_file(s, path))) goto fail;
    }
    if ((rc = st_finish(s))) goto fail;
    json_object_foreach((json_t *)wm, key, val) {
        const struct st_tensor *t = st_find(s, key);
        if (!t) {
            rc = pi_fail(PI_E_FORMAT, "safetensors: tensor '%s' listed in %s is missing from %s", key, index_path,
                         json_string_value(val));
            goto fail;
        }
    }
    free(path);
    json_decref(idx);
    return 0;
fail:
    free(path);
    json_decref(idx);
    return rc;
}

int st_open_dir(struct st_set **out, const char *dir)
{
    int rc;
    char *path = NULL;
    struct st_set *s = calloc(1, sizeof *s);
    if (!s) return pi_fail(PI_E_NOMEM, "safetensors: out of memory");
    if (asprintf(&path, "%s/%s", dir, ST_INDEX_NAME) < 0) {
        path = NULL;
        rc = pi_fail(PI_E_NOMEM, "safetensors: out of memory");
        goto fail;
    }
    if (access(path, F_OK) == 0) {
        rc = st_open_index(s, dir, path);
    } else {
        free(path);
        if (asprintf(&path, "%s/%s", dir, ST_SINGLE_NAME) < 0) {
            path = NULL;
            rc = pi_fail(PI_E_NOMEM, "safetensors: out of memory");
            goto fail;
        }
        if (access(path, F_OK) != 0) {
            rc = pi_fail(PI_E_NOTFOUND, "safetensors: %s has neither %s nor %s", dir, ST_SINGLE_NAME, ST_INDEX_NAME);
            goto fail;
        }
        rc = st_load_file(s, path);
        if (!rc) rc = st_finish(s);
    }
    if (rc) goto fail;
    free(path);
    *out = s;
    return 0;
fail:
    free(path);
    st_close(s);
    return rc;
}

void st_close(struct st_set *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n_tensors; i++) free(s->tensors[i].name);
    free(s->tensors);
    for (size_t i = 0; i < s->n_files; i++) {
        if (s->files[i].map) munmap(s->files[i].map, s->files[i].size);
        free(s->files[i].path);
    }
    free(s->files);
    free(s);
}

size_t st_n_tensors(const struct st_set *s) { return s->n_tensors; }

const struct st_tensor *st_tensor_at(const struct st_set *s, size_t i)
{
    return i < s->n_tensors ? &s->tensors[i] : NULL;
}

const struct st_tensor *st_find(const struct st_set *s, const char *name)
{
    if (!s->n_tensors) return NULL;
    struct st_tensor key = { .name = (char *)name };
    return bsearch(&key, s->tensors, s->n_tensors, sizeof key, st_cmp_name);
}

void st_read_f32(const struct st_tensor *t, int64_t first, int64_t n, float *dst)
{
    const uint8_t *p = (const uint8_t *)t->data + (size_t)first * st_dtype_size(t->dtype);
    switch (t->dtype) {
    case ST_F32:
        memcpy(dst, p, (size_t)n * sizeof(float));
        break;
    case ST_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, sizeof h);
            dst[i] = pi_f16_to_f32(h);
        }
        break;
    case ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, sizeof h);
            dst[i] = pi_bf16_to_f32(h);
        }
        break;
    }
}
