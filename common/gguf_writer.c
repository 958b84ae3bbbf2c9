/* gguf_writer.c — streaming GGUF writer: keys and tensor shapes are declared first, so the header
 * (with every tensor's offset) can be written before any tensor data; the data then streams one
 * tensor at a time. Output goes to PATH.tmp and is fsynced and renamed over PATH only by a
 * successful close, so a crash or error never leaves a half-written file under the final name, and
 * an interrupting signal removes PATH.tmp (tmp_guard.h). */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pi_err.h"
#include "quant.h"
#include "tmp_guard.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf_writer.c writes host-order values: it assumes a little-endian host"
#endif

#define GGUF_WRITER_VERSION 3
#define GGUF_WRITER_KEY_ALIGNMENT "general.alignment"
#define GGUF_TMP_SUFFIX ".tmp"
#define GGUF_PAD_CHUNK 64 /* zeros written per fwrite when padding */

struct gguf_wkv {
    char *key;
    enum gguf_type type;
    uint8_t raw[8];        /* scalar value, little-endian */
    enum gguf_type elem_type;
    size_t n;              /* array elements, or string length */
    void *data;            /* string bytes, or numeric array elements */
    char **strs;           /* string arrays: n copies */
    size_t *lens;
};

struct gguf_wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    size_t nbytes;
    uint64_t offset;       /* in the data section, computed by open */
    const void *data;      /* caller's, may be NULL (streamed) */
};

struct gguf_writer {
    uint32_t magic;
    struct gguf_wkv *kv;
    size_t n_kv, cap_kv;
    struct gguf_wtensor *t;
    size_t n_t, cap_t;
    /* open file state */
    FILE *fp;
    char *path, *tmp_path;
    size_t alignment;
    uint64_t pos;          /* bytes written so far */
    uint64_t data_start;   /* file offset of the data section */
    size_t next_tensor;
    int error;             /* first write error: later calls fail with it */
    int guard;             /* tmp_guard slot of tmp_path while it exists, or -1 */
};

static void wkv_fini(struct gguf_wkv *kv)
{
    free(kv->key);
    free(kv->data);
    if (kv->strs)
        for (size_t i = 0; i < kv->n; i++)
            free(kv->strs[i]);
    free(kv->strs);
    free(kv->lens);
    memset(kv, 0, sizeof *kv);
}

int gguf_writer_new(struct gguf_writer **out, uint32_t magic)
{
    *out = NULL;
    if (magic != GGUF_MAGIC_GGUF && magic != GGUF_MAGIC_PWRI)
        return pi_fail(PI_E_INVAL, "gguf writer: bad magic %08x (expected GGUF or PWRI)", magic);
    struct gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return pi_fail(PI_E_NOMEM, "gguf writer: cannot allocate");
    w->magic = magic;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    w->guard = -1;
    *out = w;
    return 0;
}

/* Drop the open file, removing PATH.tmp (nothing under the final name is touched). */
static void writer_abort(struct gguf_writer *w)
{
    if (w->fp) {
        fclose(w->fp);
        w->fp = NULL;
        unlink(w->tmp_path);
    }
    tmp_guard_drop(w->guard); /* after the unlink: a signal in between only unlinks it again */
    w->guard = -1;
    free(w->path);
    free(w->tmp_path);
    w->path = w->tmp_path = NULL;
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w)
        return;
    writer_abort(w);
    for (size_t i = 0; i < w->n_kv; i++)
        wkv_fini(&w->kv[i]);
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* ---- keys ---- */

/* The entry for key: the existing one emptied (set replaces), or a new one at the end. */
static int kv_slot(struct gguf_writer *w, const char *key, struct gguf_wkv **out)
{
    if (!key || !*key)
        return pi_fail(PI_E_INVAL, "gguf writer: empty key");
    if (w->fp)
        return pi_fail(PI_E_INVAL, "gguf writer: key '%s' set after open", key);
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            char *k = w->kv[i].key;
            w->kv[i].key = NULL;
            wkv_fini(&w->kv[i]);
            w->kv[i].key = k;
            *out = &w->kv[i];
            return 0;
        }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        struct gguf_wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv)
            return pi_fail(PI_E_NOMEM, "gguf writer: cannot grow to %zu keys", cap);
        w->kv = kv;
        w->cap_kv = cap;
    }
    struct gguf_wkv *kv = &w->kv[w->n_kv];
    memset(kv, 0, sizeof *kv);
    if (!(kv->key = strdup(key)))
        return pi_fail(PI_E_NOMEM, "gguf writer: cannot copy key '%s'", key);
    w->n_kv++;
    *out = kv;
    return 0;
}

int gguf_writer_set_scalar(struct gguf_writer *w, const char *key, enum gguf_type type, const void *v)
{
    size_t sz = gguf_type_size(type);
    if (sz == 0)
        return pi_fail(PI_E_INVAL, "gguf writer: key '%s': %s is not a scalar type", key ? key : "",
                       gguf_type_name(type));
    struct gguf_wkv *kv;
    int rc = kv_slot(w, key, &kv);
    if (rc)
        return rc;
    kv->type = type;
    memcpy(kv->raw, v, sz);
    if (type == GGUF_TYPE_BOOL)
        kv->raw[0] = kv->raw[0] != 0; /* the reader accepts only 0 and 1 */
    return 0;
}

int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    return gguf_writer_set_scalar(w, key, GGUF_TYPE_UINT32, &v);
}

int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    return gguf_writer_set_scalar(w, key, GGUF_TYPE_INT32, &v);
}

int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
    return gguf_writer_set_scalar(w, key, GGUF_TYPE_UINT64, &v);
}

int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
    return gguf_writer_set_scalar(w, key, GGUF_TYPE_FLOAT32, &v);
}

int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v;
    return gguf_writer_set_scalar(w, key, GGUF_TYPE_BOOL, &b);
}

static int set_str_n(struct gguf_writer *w, const char *key, const char *v, size_t len)
{
    struct gguf_wkv *kv;
    int rc = kv_slot(w, key, &kv);
    if (rc)
        return rc;
    kv->type = GGUF_TYPE_STRING;
    if (!(kv->data = malloc(len ? len : 1)))
        return pi_fail(PI_E_NOMEM, "gguf writer: key '%s': cannot copy %zu bytes", key, len);
    memcpy(kv->data, v, len);
    kv->n = len;
    return 0;
}

int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
    if (!v)
        return pi_fail(PI_E_INVAL, "gguf writer: key '%s': NULL string", key ? key : "");
    return set_str_n(w, key, v, strlen(v));
}

int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
                        const void *data, size_t n)
{
    size_t esz = gguf_type_size(elem_type), bytes;
    if (esz == 0)
        return pi_fail(PI_E_INVAL, "gguf writer: key '%s': array of %s (use set_arr_str for strings)",
                       key ? key : "", gguf_type_name(elem_type));
    if (__builtin_mul_overflow(n, esz, &bytes) || (n && !data))
        return pi_fail(PI_E_INVAL, "gguf writer: key '%s': bad array of %zu elements", key ? key : "",
                       n);
    struct gguf_wkv *kv;
    int rc = kv_slot(w, key, &kv);
    if (rc)
        return rc;
    kv->type = GGUF_TYPE_ARRAY;
    kv->elem_type = elem_type;
    if (!(kv->data = malloc(bytes ? bytes : 1)))
        return pi_fail(PI_E_NOMEM, "gguf writer: key '%s': cannot copy %zu bytes", key, bytes);
    if (bytes)
        memcpy(kv->data, data, bytes);
    kv->n = n;
    return 0;
}

int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            const size_t *lens, size_t n)
{
    if (n && !strs)
        return pi_fail(PI_E_INVAL, "gguf writer: key '%s': NULL string array", key ? key : "");
    struct gguf_wkv *kv;
    int rc = kv_slot(w, key, &kv);
    if (rc)
        return rc;
    kv->type = GGUF_TYPE_ARRAY;
    kv->elem_type = GGUF_TYPE_STRING;
    kv->strs = calloc(n ? n : 1, sizeof *kv->strs);
    kv->lens = calloc(n ? n : 1, sizeof *kv->lens);
    if (!kv->strs || !kv->lens)
        return pi_fail(PI_E_NOMEM, "gguf writer: key '%s': cannot copy %zu strings", key, n);
    kv->n = n; /* set now so that wkv_fini frees the copies made so far */
    for (size_t i = 0; i < n; i++) {
        size_t len = lens ? lens[i] : strlen(strs[i]);
        if (!(kv->strs[i] = malloc(len ? len : 1)))
            return pi_fail(PI_E_NOMEM, "gguf writer: key '%s': cannot copy string %zu", key, i);
        memcpy(kv->strs[i], strs[i], len);
        kv->lens[i] = len;
    }
    return 0;
}

int gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_file *src)
{
    int rc = 0;
    for (size_t i = 0; i < gguf_n_kv(src) && rc == 0; i++) {
        const char *key = gguf_kv_key(src, i);
        enum gguf_type type = gguf_kv_type(src, i);
        if (type == GGUF_TYPE_STRING) {
            const char *s;
            if ((rc = gguf_get_str(src, key, &s)) == 0)
                rc = gguf_writer_set_str(w, key, s);
        } else if (type == GGUF_TYPE_ARRAY) {
            enum gguf_type et;
            size_t n;
            const void *data;
            if ((rc = gguf_get_arr(src, key, &et, &n, &data)))
                break;
            if (et != GGUF_TYPE_STRING) {
                rc = gguf_writer_set_arr(w, key, et, data, n);
                continue;
            }
            /* Re-set from the reader's copies; lens keeps embedded NULs intact. */
            const char **strs = calloc(n ? n : 1, sizeof *strs);
            size_t *lens = calloc(n ? n : 1, sizeof *lens);
            if (!strs || !lens)
                rc = pi_fail(PI_E_NOMEM, "gguf writer: key '%s': cannot copy %zu strings", key, n);
            for (size_t j = 0; j < n && rc == 0; j++)
                rc = gguf_get_arr_str(src, key, j, &strs[j], &lens[j]);
            if (rc == 0)
                rc = gguf_writer_set_arr_str(w, key, strs, lens, n);
            free(strs);
            free(lens);
        } else {
            rc = gguf_writer_set_scalar(w, key, type, gguf_kv_data(src, i));
        }
    }
    return rc;
}

/* ---- tensors ---- */

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data)
{
    if (!name || !*name)
        return pi_fail(PI_E_INVAL, "gguf writer: empty tensor name");
    if (w->fp)
        return pi_fail(PI_E_INVAL, "gguf writer: tensor '%s' added after open", name);
    const struct pi_type_traits *tr = quant_traits(type);
    if (!tr || tr->blck_size <= 0)
        return pi_fail(PI_E_UNSUPPORTED, "gguf writer: tensor '%s': unknown type %u", name, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return pi_fail(PI_E_INVAL, "gguf writer: tensor '%s': n_dims %u not in 1..%d", name, n_dims,
                       GGUF_MAX_DIMS);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return pi_fail(PI_E_INVAL, "gguf writer: duplicate tensor '%s'", name);
    struct gguf_wtensor t = {.type = type, .n_dims = n_dims, .data = data};
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0) /* 0 is an empty tensor, as in ggml */
            return pi_fail(PI_E_INVAL, "gguf writer: tensor '%s': ne[%u] = %lld < 0", name, d,
                           (long long)t.ne[d]);
    }
    if (t.ne[0] % tr->blck_size)
        return pi_fail(PI_E_INVAL, "gguf writer: tensor '%s': ne[0] = %lld not a multiple of the %s "
                       "block size %d", name, (long long)t.ne[0], tr->name, tr->blck_size);
    /* nbytes = ne[0]/blck * type_size * ne[1]*ne[2]*ne[3], overflow-checked as the reader does */
    size_t nbytes = (size_t)(t.ne[0] / tr->blck_size);
    bool ovf = __builtin_mul_overflow(nbytes, tr->type_size, &nbytes);
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        ovf |= __builtin_mul_overflow(nbytes, (size_t)t.ne[d], &nbytes);
    if (ovf)
        return pi_fail(PI_E_INVAL, "gguf writer: tensor '%s': size overflows", name);
    t.nbytes = nbytes;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        struct gguf_wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt)
            return pi_fail(PI_E_NOMEM, "gguf writer: cannot grow to %zu tensors", cap);
        w->t = nt;
        w->cap_t = cap;
    }
    if (!(t.name = strdup(name)))
        return pi_fail(PI_E_NOMEM, "gguf writer: cannot copy tensor name '%s'", name);
    w->t[w->n_t++] = t;
    return 0;
}

/* ---- output ---- */

static int out_bytes(struct gguf_writer *w, const void *p, size_t n)
{
    if (w->error)
        return w->error;
    errno = 0; /* fwrite need not set errno: a short write without one is reported as EIO */
    if (n && fwrite(p, 1, n, w->fp) != n) {
        int e = errno ? errno : EIO;
        return w->error = pi_fail(e, "gguf writer: write to '%s' failed: %s", w->tmp_path,
                                  strerror(e));
    }
    w->pos += n;
    return 0;
}

static int out_u32(struct gguf_writer *w, uint32_t v) { return out_bytes(w, &v, sizeof v); }
static int out_u64(struct gguf_writer *w, uint64_t v) { return out_bytes(w, &v, sizeof v); }

static int out_str(struct gguf_writer *w, const void *s, size_t len)
{
    int rc = out_u64(w, len);
    return rc ? rc : out_bytes(w, s, len);
}

/* Zeros up to the next multiple of the alignment. */
static int out_pad(struct gguf_writer *w)
{
    static const uint8_t zeros[GGUF_PAD_CHUNK];
    size_t pad = (size_t)((w->alignment - w->pos % w->alignment) % w->alignment);
    int rc = 0;
    while (pad && rc == 0) {
        size_t n = pad < sizeof zeros ? pad : sizeof zeros;
        rc = out_bytes(w, zeros, n);
        pad -= n;
    }
    return rc;
}

static int out_kv(struct gguf_writer *w, const struct gguf_wkv *kv)
{
    int rc = out_str(w, kv->key, strlen(kv->key));
    if (rc || (rc = out_u32(w, kv->type)))
        return rc;
    if (kv->type == GGUF_TYPE_STRING)
        return out_str(w, kv->data, kv->n);
    if (kv->type != GGUF_TYPE_ARRAY)
        return out_bytes(w, kv->raw, gguf_type_size(kv->type));
    if ((rc = out_u32(w, kv->elem_type)) || (rc = out_u64(w, kv->n)))
        return rc;
    if (kv->elem_type != GGUF_TYPE_STRING)
        return out_bytes(w, kv->data, kv->n * gguf_type_size(kv->elem_type));
    for (size_t i = 0; i < kv->n && rc == 0; i++)
        rc = out_str(w, kv->strs[i], kv->lens[i]);
    return rc;
}

/* Alignment for the data section: general.alignment if the caller set it, else the default. */
static int writer_alignment(struct gguf_writer *w)
{
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, GGUF_WRITER_KEY_ALIGNMENT) != 0)
            continue;
        uint32_t a;
        memcpy(&a, w->kv[i].raw, sizeof a);
        if (w->kv[i].type != GGUF_TYPE_UINT32 || a == 0 || (a & (a - 1)))
            return pi_fail(PI_E_INVAL, "gguf writer: '%s' must be a u32 power of two",
                           GGUF_WRITER_KEY_ALIGNMENT);
        w->alignment = a;
    }
    return 0;
}

int gguf_writer_open(struct gguf_writer *w, const char *path)
{
    int rc;
    if (w->fp || w->path)
        return pi_fail(PI_E_INVAL, "gguf writer: already open");
    if ((rc = writer_alignment(w)))
        return rc;
    /* Offsets from declared sizes: tensor i starts at the end of i-1 rounded up to the alignment. */
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += w->t[i].nbytes;
        off += (w->alignment - off % w->alignment) % w->alignment;
    }
    size_t plen = strlen(path);
    w->path = strdup(path);
    w->tmp_path = malloc(plen + sizeof GGUF_TMP_SUFFIX);
    if (!w->path || !w->tmp_path) {
        rc = pi_fail(PI_E_NOMEM, "gguf writer: cannot copy path");
        goto fail;
    }
    memcpy(w->tmp_path, path, plen);
    memcpy(w->tmp_path + plen, GGUF_TMP_SUFFIX, sizeof GGUF_TMP_SUFFIX);
    w->guard = tmp_guard_add(w->tmp_path); /* ^C from here on removes PATH.tmp */
    if (!(w->fp = fopen(w->tmp_path, "wb"))) {
        rc = pi_fail(errno, "gguf writer: cannot create '%s': %s", w->tmp_path, strerror(errno));
        goto fail;
    }
    w->pos = 0;
    w->error = 0;
    w->next_tensor = 0;
    rc = out_u32(w, w->magic);
    if (!rc) rc = out_u32(w, GGUF_WRITER_VERSION);
    if (!rc) rc = out_u64(w, w->n_t);
    if (!rc) rc = out_u64(w, w->n_kv);
    for (size_t i = 0; i < w->n_kv && !rc; i++)
        rc = out_kv(w, &w->kv[i]);
    for (size_t i = 0; i < w->n_t && !rc; i++) {
        const struct gguf_wtensor *t = &w->t[i];
        rc = out_str(w, t->name, strlen(t->name));
        if (!rc) rc = out_u32(w, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && !rc; d++)
            rc = out_u64(w, (uint64_t)t->ne[d]);
        if (!rc) rc = out_u32(w, t->type);
        if (!rc) rc = out_u64(w, t->offset);
    }
    if (!rc) rc = out_pad(w);
    if (rc)
        goto fail;
    w->data_start = w->pos;
    return 0;
fail:
    writer_abort(w);
    return rc;
}

int gguf_writer_write_tensor(struct gguf_writer *w, const void *data)
{
    if (!w->fp)
        return pi_fail(PI_E_INVAL, "gguf writer: write_tensor before open");
    if (w->next_tensor >= w->n_t)
        return pi_fail(PI_E_INVAL, "gguf writer: all %zu declared tensors already written", w->n_t);
    const struct gguf_wtensor *t = &w->t[w->next_tensor];
    if (!data)
        return pi_fail(PI_E_INVAL, "gguf writer: tensor '%s': no data", t->name);
    /* Padding after each tensor (the last one too, as llama.cpp writes) keeps pos == offset here. */
    int rc = out_bytes(w, data, t->nbytes);
    if (!rc) rc = out_pad(w);
    if (rc)
        return rc;
    w->next_tensor++;
    return 0;
}

/* fsync the directory holding path so that the rename itself is durable. */
static int sync_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return pi_fail(PI_E_NOMEM, "gguf writer: cannot copy path");
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (fd >= 0) {
        if (fsync(fd) != 0 && errno != EINVAL) /* some filesystems cannot fsync directories */
            rc = pi_fail(errno, "gguf writer: fsync of the directory of '%s': %s", path,
                         strerror(errno));
        close(fd);
    }
    free(copy);
    return rc;
}

int gguf_writer_close(struct gguf_writer *w)
{
    int rc;
    if (!w->fp)
        return pi_fail(PI_E_INVAL, "gguf writer: close without open");
    if (w->error) {
        rc = w->error;
        goto fail;
    }
    if (w->next_tensor != w->n_t) {
        rc = pi_fail(PI_E_INVAL, "gguf writer: '%s': only %zu of %zu tensors written (next '%s')",
                     w->path, w->next_tensor, w->n_t, w->t[w->next_tensor].name);
        goto fail;
    }
    if (fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0) {
        rc = pi_fail(errno, "gguf writer: flushing '%s': %s", w->tmp_path, strerror(errno));
        goto fail;
    }
    FILE *fp = w->fp;
    w->fp = NULL;
    if (fclose(fp) != 0) {
        rc = pi_fail(errno, "gguf writer: closing '%s': %s", w->tmp_path, strerror(errno));
        unlink(w->tmp_path);
        goto fail;
    }
    if (rename(w->tmp_path, w->path) != 0) {
        rc = pi_fail(errno, "gguf writer: renaming '%s' to '%s': %s", w->tmp_path, w->path,
                     strerror(errno));
        unlink(w->tmp_path);
        goto fail;
    }
    rc = sync_dir(w->path);
    writer_abort(w); /* fp is NULL: only frees the paths */
    return rc;
fail:
    writer_abort(w);
    return rc;
}

int gguf_writer_write_file(struct gguf_writer *w, const char *path)
{
    for (size_t i = 0; i < w->n_t; i++)
        if (!w->t[i].data)
            return pi_fail(PI_E_INVAL, "gguf writer: tensor '%s' declared without data", w->t[i].name);
    int rc = gguf_writer_open(w, path);
    for (size_t i = 0; i < w->n_t && !rc; i++)
        rc = gguf_writer_write_tensor(w, w->t[i].data);
    if (rc) {
        writer_abort(w);
        return rc;
    }
    return gguf_writer_close(w);
}

int gguf_check_not_input(const char *out, const char *in, const char *what)
{
    struct stat so, si;
    if (!out || !in || stat(out, &so) != 0 || stat(in, &si) != 0)
        return 0; /* a missing output cannot be an input; a missing input fails where it is opened */
    if (so.st_dev == si.st_dev && so.st_ino == si.st_ino)
        return pi_fail(PI_E_INVAL, "the output '%s' is %s '%s' (the same file): refusing to overwrite an input", out,
                       what, in);
    return 0;
}
