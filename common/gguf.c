/* gguf.c — GGUF v2/v3 reader: maps the file read-only and validates every length, count, shape,
 * type and offset against the file size before anything uses it (see gguf.h for the layout).
 *
 * Error codes: a length or count that runs past the end of the file is -PI_E_TRUNCATED; a value
 * that is wrong in itself (bad magic, n_dims 5, misaligned offset, duplicate name) is -PI_E_FORMAT;
 * a well-formed thing we do not handle (version 1, unknown tensor type, nested array) is
 * -PI_E_UNSUPPORTED. Every message names the field ("gguf: kv #3 'general.name': ..."). */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pi_err.h"
#include "quant.h"

/* Values are read with memcpy straight from the little-endian image. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c assumes a little-endian host"
#endif

#define GGUF_HEADER_SIZE 24 /* magic u32, version u32, n_tensors u64, n_kv u64 */
#define GGUF_VERSION_MIN 2  /* v1 had 32-bit counts; nobody writes it any more */
#define GGUF_VERSION_MAX 3
#define GGUF_KEY_ALIGNMENT "general.alignment"
/* Smallest possible encodings, used to reject counts that cannot fit in the file before allocating:
 * a kv is key length u64 + type u32 + a 1-byte value; a tensor info is name length u64 + n_dims u32
 * + one u64 dim + type u32 + offset u64; a string array element is at least its u64 length. */
#define GGUF_MIN_KV_BYTES (8 + 4 + 1)
#define GGUF_MIN_TENSOR_INFO_BYTES (8 + 4 + 8 + 4 + 8)
#define GGUF_STRING_LEN_BYTES 8
/* Longest name quoted in an error message (names come from the file and may be garbage). */
#define GGUF_MSG_NAME_MAX 80
#define GGUF_INDEX_MIN_SLOTS 8

struct gguf_kv {
    char *key;              /* NUL-terminated copy */
    enum gguf_type type;
    size_t val_off;         /* file offset of a scalar value or of an array's first element */
    /* STRING */
    char *str;              /* NUL-terminated copy */
    size_t len;
    /* ARRAY */
    enum gguf_type elem_type;
    size_t n;
    char *pool;             /* string arrays: every element, each followed by a NUL */
    size_t *offs;           /* string arrays: n+1 starts in pool (element i is offs[i]..offs[i+1]-1) */
};

/* Open-addressing hash from name to index, for duplicate detection and lookups. */
struct gguf_index {
    uint32_t *slot; /* index + 1; 0 = empty */
    size_t mask;
};

struct gguf_file {
    const uint8_t *base;
    size_t size;
    bool mapped;     /* base is ours to munmap, map_len bytes */
    bool anon;       /* gguf_open_read's copy (not a file mapping) */
    size_t map_len;
    uint32_t magic;
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    size_t n_kv;
    struct gguf_kv *kv;
    struct gguf_index kv_index;
    size_t n_tensors;
    struct gguf_tensor *tensors;
    struct gguf_index tensor_index;
};

/* Parse cursor over the image; every read is checked against size. */
struct gguf_cur {
    const uint8_t *p;
    size_t size;
    size_t pos;
    const char *ctx; /* "kv #3 'general.name'" — prefix of every message */
};

static const char *const gguf_type_names[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = "u8",     [GGUF_TYPE_INT8] = "i8",     [GGUF_TYPE_UINT16] = "u16",
    [GGUF_TYPE_INT16] = "i16",    [GGUF_TYPE_UINT32] = "u32",  [GGUF_TYPE_INT32] = "i32",
    [GGUF_TYPE_FLOAT32] = "f32",  [GGUF_TYPE_BOOL] = "bool",   [GGUF_TYPE_STRING] = "string",
    [GGUF_TYPE_ARRAY] = "array",  [GGUF_TYPE_UINT64] = "u64",  [GGUF_TYPE_INT64] = "i64",
    [GGUF_TYPE_FLOAT64] = "f64",
};

static const size_t gguf_type_sizes[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,  [GGUF_TYPE_UINT16] = 2, [GGUF_TYPE_INT16] = 2,
    [GGUF_TYPE_UINT32] = 4,  [GGUF_TYPE_INT32] = 4, [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,
    [GGUF_TYPE_STRING] = 0,  [GGUF_TYPE_ARRAY] = 0, [GGUF_TYPE_UINT64] = 8, [GGUF_TYPE_INT64] = 8,
    [GGUF_TYPE_FLOAT64] = 8,
};

size_t gguf_type_size(enum gguf_type t)
{
    return (unsigned)t < GGUF_TYPE_COUNT ? gguf_type_sizes[t] : 0;
}

const char *gguf_type_name(enum gguf_type t)
{
    return (unsigned)t < GGUF_TYPE_COUNT ? gguf_type_names[t] : "?";
}

/* ---- name index ---- */

/* FNV-1a 64: h = (h ^ byte) * prime, over the NUL-terminated name. */
static uint64_t gguf_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static int gguf_index_init(struct gguf_index *ix, size_t n)
{
    if (n >= UINT32_MAX / 2) /* slots hold index + 1 in 32 bits */
        return pi_fail(PI_E_UNSUPPORTED, "gguf: %zu entries are too many to index", n);
    size_t cap = GGUF_INDEX_MIN_SLOTS;
    while (cap < 2 * n) /* load factor <= 1/2 keeps probes short */
        cap *= 2;
    ix->slot = calloc(cap, sizeof *ix->slot);
    if (!ix->slot)
        return pi_fail(PI_E_NOMEM, "gguf: cannot allocate an index of %zu slots", cap);
    ix->mask = cap - 1;
    return 0;
}

static void gguf_index_fini(struct gguf_index *ix)
{
    free(ix->slot);
    ix->slot = NULL;
}

typedef const char *(*gguf_name_at_fn)(const struct gguf_file *f, size_t i);

static const char *kv_name_at(const struct gguf_file *f, size_t i) { return f->kv[i].key; }
static const char *tensor_name_at(const struct gguf_file *f, size_t i) { return f->tensors[i].name; }

/* Slot holding name, or the empty slot where it would go (the table is never full). */
static size_t gguf_index_probe(const struct gguf_file *f, const struct gguf_index *ix,
                               const char *name, gguf_name_at_fn name_at)
{
    size_t h = gguf_hash(name) & ix->mask;
    while (ix->slot[h] && strcmp(name_at(f, ix->slot[h] - 1), name) != 0)
        h = (h + 1) & ix->mask;
    return h;
}

static int64_t gguf_index_find(const struct gguf_file *f, const struct gguf_index *ix,
                               const char *name, gguf_name_at_fn name_at)
{
    if (!ix->slot)
        return -1;
    uint32_t s = ix->slot[gguf_index_probe(f, ix, name, name_at)];
    return s ? (int64_t)s - 1 : -1;
}

/* Insert entry i; returns the index already stored under its name (a duplicate), else -1. */
static int64_t gguf_index_insert(const struct gguf_file *f, struct gguf_index *ix, size_t i,
                                 gguf_name_at_fn name_at)
{
    size_t h = gguf_index_probe(f, ix, name_at(f, i), name_at);
    if (ix->slot[h])
        return (int64_t)ix->slot[h] - 1;
    ix->slot[h] = (uint32_t)i + 1;
    return -1;
}

/* ---- cursor ---- */

static int cur_need(struct gguf_cur *c, uint64_t n, const char *what)
{
    if (n > c->size - c->pos)
        return pi_fail(PI_E_TRUNCATED,
                       "gguf: %s: %s (%llu bytes at offset %zu) beyond end of file (size %zu)", c->ctx,
                       what, (unsigned long long)n, c->pos, c->size);
    return 0;
}

static int cur_u32(struct gguf_cur *c, uint32_t *v, const char *what)
{
    int rc = cur_need(c, sizeof *v, what);
    if (rc)
        return rc;
    memcpy(v, c->p + c->pos, sizeof *v);
    c->pos += sizeof *v;
    return 0;
}

static int cur_u64(struct gguf_cur *c, uint64_t *v, const char *what)
{
    int rc = cur_need(c, sizeof *v, what);
    if (rc)
        return rc;
    memcpy(v, c->p + c->pos, sizeof *v);
    c->pos += sizeof *v;
    return 0;
}

/* A gguf string: u64 length then bytes. On success *s points into the image, not NUL-terminated. */
static int cur_str(struct gguf_cur *c, const uint8_t **s, size_t *len, const char *what)
{
    uint64_t n;
    int rc = cur_u64(c, &n, what);
    if (rc)
        return rc;
    if (n > c->size - c->pos)
        return pi_fail(PI_E_TRUNCATED, "gguf: %s: %s length %llu beyond end of file (size %zu)",
                       c->ctx, what, (unsigned long long)n, c->size);
    *s = c->p + c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return 0;
}

/* A name (key or tensor name): non-empty, no NUL inside, copied with a NUL. */
static int cur_name(struct gguf_cur *c, char **out, const char *what)
{
    const uint8_t *s;
    size_t len;
    int rc = cur_str(c, &s, &len, what);
    if (rc)
        return rc;
    if (len == 0)
        return pi_fail(PI_E_FORMAT, "gguf: %s: empty %s", c->ctx, what);
    if (memchr(s, 0, len))
        return pi_fail(PI_E_FORMAT, "gguf: %s: %s contains a NUL byte", c->ctx, what);
    char *copy = malloc(len + 1);
    if (!copy)
        return pi_fail(PI_E_NOMEM, "gguf: %s: cannot allocate %s of %zu bytes", c->ctx, what, len);
    memcpy(copy, s, len);
    copy[len] = '\0';
    *out = copy;
    return 0;
}

/* ---- key/value section ---- */

/* String array: validate every element, then copy all into one pool with NULs. */
static int parse_str_array(struct gguf_cur *c, struct gguf_kv *kv)
{
    size_t start = c->pos, total = 0;
    const uint8_t *s;
    size_t len;
    for (size_t i = 0; i < kv->n; i++) {
        int rc = cur_str(c, &s, &len, "array string");
        if (rc)
            return rc;
        total += len; /* cannot overflow: every len was checked against the file size */
    }
    kv->offs = malloc((kv->n + 1) * sizeof *kv->offs);
    kv->pool = malloc(total + kv->n + 1);
    if (!kv->offs || !kv->pool)
        return pi_fail(PI_E_NOMEM, "gguf: %s: cannot allocate %zu strings", c->ctx, kv->n);
    /* Second pass: the lengths are known good now. */
    size_t pos = start, at = 0;
    for (size_t i = 0; i < kv->n; i++) {
        uint64_t n64;
        memcpy(&n64, c->p + pos, sizeof n64);
        pos += sizeof n64;
        kv->offs[i] = at;
        memcpy(kv->pool + at, c->p + pos, (size_t)n64);
        at += (size_t)n64;
        kv->pool[at++] = '\0';
        pos += (size_t)n64;
    }
    kv->offs[kv->n] = at;
    kv->pool[at] = '\0';
    return 0;
}

static int parse_value(struct gguf_cur *c, struct gguf_kv *kv)
{
    int rc;
    if ((unsigned)kv->type >= GGUF_TYPE_COUNT)
        return pi_fail(PI_E_FORMAT, "gguf: %s: unknown value type %u", c->ctx, (unsigned)kv->type);
    kv->val_off = c->pos;
    if (kv->type == GGUF_TYPE_STRING) {
        const uint8_t *s;
        if ((rc = cur_str(c, &s, &kv->len, "string")))
            return rc;
        if (!(kv->str = malloc(kv->len + 1)))
            return pi_fail(PI_E_NOMEM, "gguf: %s: cannot allocate a string of %zu bytes", c->ctx,
                           kv->len);
        memcpy(kv->str, s, kv->len);
        kv->str[kv->len] = '\0';
        return 0;
    }
    if (kv->type != GGUF_TYPE_ARRAY) {
        if ((rc = cur_need(c, gguf_type_sizes[kv->type], gguf_type_names[kv->type])))
            return rc;
        if (kv->type == GGUF_TYPE_BOOL && c->p[c->pos] > 1)
            return pi_fail(PI_E_FORMAT, "gguf: %s: bool value %u is neither 0 nor 1", c->ctx,
                           c->p[c->pos]);
        c->pos += gguf_type_sizes[kv->type];
        return 0;
    }
    uint32_t et;
    uint64_t n;
    if ((rc = cur_u32(c, &et, "array element type")) || (rc = cur_u64(c, &n, "array count")))
        return rc;
    if (et == GGUF_TYPE_ARRAY)
        return pi_fail(PI_E_UNSUPPORTED, "gguf: %s: arrays of arrays are not supported", c->ctx);
    if (et >= GGUF_TYPE_COUNT)
        return pi_fail(PI_E_FORMAT, "gguf: %s: unknown array element type %u", c->ctx, et);
    kv->elem_type = (enum gguf_type)et;
    size_t remain = c->size - c->pos;
    size_t esize = et == GGUF_TYPE_STRING ? GGUF_STRING_LEN_BYTES : gguf_type_sizes[et];
    /* n * esize > remain, written so that it cannot overflow */
    if (n > remain / esize)
        return pi_fail(PI_E_TRUNCATED,
                       "gguf: %s: array count %llu of %s (at least %zu bytes each) beyond end of file "
                       "(size %zu)",
                       c->ctx, (unsigned long long)n, gguf_type_names[et], esize, c->size);
    kv->n = (size_t)n;
    kv->val_off = c->pos;
    if (et == GGUF_TYPE_STRING)
        return parse_str_array(c, kv);
    if (et == GGUF_TYPE_BOOL)
        for (size_t i = 0; i < kv->n; i++)
            if (c->p[c->pos + i] > 1)
                return pi_fail(PI_E_FORMAT, "gguf: %s: bool element %zu is %u, neither 0 nor 1",
                               c->ctx, i, c->p[c->pos + i]);
    c->pos += kv->n * esize;
    return 0;
}

static int parse_kvs(struct gguf_file *f, struct gguf_cur *c)
{
    char ctx[GGUF_MSG_NAME_MAX + 64];
    int rc;
    if ((rc = gguf_index_init(&f->kv_index, f->n_kv)))
        return rc;
    for (size_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        snprintf(ctx, sizeof ctx, "kv #%zu", i);
        c->ctx = ctx;
        if ((rc = cur_name(c, &kv->key, "key")))
            return rc;
        snprintf(ctx, sizeof ctx, "kv #%zu '%.*s'", i, GGUF_MSG_NAME_MAX, kv->key);
        int64_t dup = gguf_index_insert(f, &f->kv_index, i, kv_name_at);
        if (dup >= 0)
            return pi_fail(PI_E_FORMAT, "gguf: %s: duplicate key (first at kv #%lld)", ctx,
                           (long long)dup);
        uint32_t type;
        if ((rc = cur_u32(c, &type, "value type")))
            return rc;
        kv->type = (enum gguf_type)type;
        if ((rc = parse_value(c, kv)))
            return rc;
    }
    return 0;
}

static int parse_alignment(struct gguf_file *f)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_find_key(f, GGUF_KEY_ALIGNMENT);
    if (i < 0)
        return 0;
    const struct gguf_kv *kv = &f->kv[i];
    if (kv->type != GGUF_TYPE_UINT32)
        return pi_fail(PI_E_FORMAT, "gguf: kv #%lld '%s': type %s, expected u32", (long long)i,
                       GGUF_KEY_ALIGNMENT, gguf_type_name(kv->type));
    uint32_t a;
    memcpy(&a, f->base + kv->val_off, sizeof a);
    if (a == 0 || (a & (a - 1)) != 0)
        return pi_fail(PI_E_FORMAT, "gguf: kv #%lld '%s': %u is not a nonzero power of two",
                       (long long)i, GGUF_KEY_ALIGNMENT, a);
    f->alignment = a;
    return 0;
}

/* ---- tensor infos ---- */

static int parse_tensor_info(struct gguf_file *f, struct gguf_cur *c, size_t i, char *ctx,
                             size_t ctx_cap)
{
    struct gguf_tensor *t = &f->tensors[i];
    char *name = NULL;
    int rc;
    snprintf(ctx, ctx_cap, "tensor #%zu", i);
    c->ctx = ctx;
    if ((rc = cur_name(c, &name, "name")))
        return rc;
    t->name = name;
    snprintf(ctx, ctx_cap, "tensor #%zu '%.*s'", i, GGUF_MSG_NAME_MAX, name);
    int64_t dup = gguf_index_insert(f, &f->tensor_index, i, tensor_name_at);
    if (dup >= 0)
        return pi_fail(PI_E_FORMAT, "gguf: %s: duplicate tensor name (first at tensor #%lld)", ctx,
                       (long long)dup);
    if ((rc = cur_u32(c, &t->n_dims, "n_dims")))
        return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return pi_fail(PI_E_FORMAT, "gguf: %s: n_dims %u not in 1..%d", ctx, t->n_dims,
                       GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && (rc = cur_u64(c, &ne, "dimension")))
            return rc;
        /* 0 is valid, as in ggml: an empty tensor (PowerInfer's gpuidx writes empty buckets) */
        if (ne > INT64_MAX)
            return pi_fail(PI_E_FORMAT, "gguf: %s: ne[%u] = %llu out of range 0..INT64_MAX", ctx, d,
                           (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if ((rc = cur_u32(c, &t->type, "type")) || (rc = cur_u64(c, &t->offset, "offset")))
        return rc;

    const struct pi_type_traits *tr = quant_traits(t->type);
    if (!tr || tr->blck_size <= 0 || tr->type_size == 0)
        return pi_fail(PI_E_UNSUPPORTED, "gguf: %s: unknown tensor type %u", ctx, t->type);
    if (t->ne[0] % tr->blck_size != 0)
        return pi_fail(PI_E_FORMAT, "gguf: %s: ne[0] = %lld is not a multiple of the %s block size %d",
                       ctx, (long long)t->ne[0], tr->name, tr->blck_size);
    /* nbytes = ne[0]/blck * type_size * ne[1]*ne[2]*ne[3], every product overflow-checked; the
     * element count must also fit in int64 for the kernels' loops. */
    int64_t nel = t->ne[0];
    size_t nbytes = (size_t)(t->ne[0] / tr->blck_size);
    bool ovf = __builtin_mul_overflow(nbytes, tr->type_size, &nbytes);
    for (int d = 1; d < GGUF_MAX_DIMS; d++) {
        ovf |= __builtin_mul_overflow(nel, t->ne[d], &nel);
        ovf |= __builtin_mul_overflow(nbytes, (size_t)t->ne[d], &nbytes);
    }
    if (ovf)
        return pi_fail(PI_E_FORMAT, "gguf: %s: shape [%lld, %lld, %lld, %lld] overflows", ctx,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3]);
    t->nbytes = nbytes;
    if (t->offset % f->alignment != 0)
        return pi_fail(PI_E_FORMAT, "gguf: %s: data offset %llu is not a multiple of the alignment %zu",
                       ctx, (unsigned long long)t->offset, f->alignment);
    return 0;
}

/* Data section placement: needs data_offset, so runs after every info is read. */
static int check_tensor_data(struct gguf_file *f, size_t i)
{
    struct gguf_tensor *t = &f->tensors[i];
    size_t avail = f->data_offset <= f->size ? f->size - f->data_offset : 0;
    if (t->offset > avail || t->nbytes > avail - t->offset)
        return pi_fail(PI_E_TRUNCATED,
                       "gguf: tensor #%zu '%.*s': data offset %llu + %zu bytes beyond end of file (data "
                       "section at %zu, file size %zu)",
                       i, GGUF_MSG_NAME_MAX, t->name, (unsigned long long)t->offset, t->nbytes,
                       f->data_offset, f->size);
    t->data = f->base + f->data_offset + t->offset;
    return 0;
}

/* A tensor's data offset and index, sorted by offset (then index, so that the order is total). */
struct offset_order {
    uint64_t offset;
    size_t i;
};

static int by_offset(const void *a, const void *b)
{
    const struct offset_order *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : (x->i > y->i) - (x->i < y->i);
}

/* No two tensors may share data bytes: a crafted file could otherwise alias one tensor's weights
 * into another's (llama.cpp's reader requires them in order and back to back; this is the weaker
 * property the engine relies on). */
static int check_no_overlap(const struct gguf_file *f)
{
    if (f->n_tensors < 2)
        return 0;
    struct offset_order *o = malloc(f->n_tensors * sizeof *o);
    if (!o)
        return pi_fail(PI_E_NOMEM, "gguf: cannot allocate %zu tensor offsets", f->n_tensors);
    for (size_t i = 0; i < f->n_tensors; i++)
        o[i] = (struct offset_order){ f->tensors[i].offset, i };
    qsort(o, f->n_tensors, sizeof *o, by_offset);
    int rc = 0;
    for (size_t k = 1; k < f->n_tensors && !rc; k++) {
        const struct gguf_tensor *a = &f->tensors[o[k - 1].i], *b = &f->tensors[o[k].i];
        /* check_tensor_data bounded offset + nbytes by the file size: no overflow */
        if (a->offset + a->nbytes > b->offset)
            rc = pi_fail(PI_E_FORMAT,
                         "gguf: tensors '%.*s' (data %llu + %zu bytes) and '%.*s' (data at %llu) overlap",
                         GGUF_MSG_NAME_MAX, a->name, (unsigned long long)a->offset, a->nbytes, GGUF_MSG_NAME_MAX,
                         b->name, (unsigned long long)b->offset);
    }
    free(o);
    return rc;
}

static int parse_tensors(struct gguf_file *f, struct gguf_cur *c)
{
    char ctx[GGUF_MSG_NAME_MAX + 64];
    int rc;
    if ((rc = gguf_index_init(&f->tensor_index, f->n_tensors)))
        return rc;
    for (size_t i = 0; i < f->n_tensors; i++)
        if ((rc = parse_tensor_info(f, c, i, ctx, sizeof ctx)))
            return rc;
    /* data_offset = header end rounded up to the alignment (overflow-checked) */
    size_t end = c->pos, pad = (f->alignment - end % f->alignment) % f->alignment;
    if (__builtin_add_overflow(end, pad, &f->data_offset))
        return pi_fail(PI_E_FORMAT, "gguf: header end %zu cannot be aligned to %zu", end,
                       f->alignment);
    for (size_t i = 0; i < f->n_tensors; i++)
        if ((rc = check_tensor_data(f, i)))
            return rc;
    return check_no_overlap(f);
}

/* ---- header ---- */

static int parse_header(struct gguf_file *f, struct gguf_cur *c)
{
    uint64_t n_tensors, n_kv;
    int rc;
    c->ctx = "header";
    if ((rc = cur_u32(c, &f->magic, "magic")))
        return rc;
    if (f->magic != GGUF_MAGIC_GGUF && f->magic != GGUF_MAGIC_PWRI)
        return pi_fail(PI_E_FORMAT, "gguf: bad magic %08x (expected \"GGUF\" or \"PWRI\")", f->magic);
    if ((rc = cur_u32(c, &f->version, "version")))
        return rc;
    if (f->version < GGUF_VERSION_MIN || f->version > GGUF_VERSION_MAX)
        return pi_fail(PI_E_UNSUPPORTED, "gguf: version %u not supported (only %d..%d%s)", f->version,
                       GGUF_VERSION_MIN, GGUF_VERSION_MAX,
                       (f->version & 0xffffu) == 0 ? "; big-endian file?" : "");
    if ((rc = cur_u64(c, &n_tensors, "n_tensors")) || (rc = cur_u64(c, &n_kv, "n_kv")))
        return rc;
    /* Reject counts the rest of the file cannot hold before allocating anything for them. */
    size_t remain = c->size - c->pos;
    if (n_kv > remain / GGUF_MIN_KV_BYTES)
        return pi_fail(PI_E_TRUNCATED,
                       "gguf: header: n_kv %llu cannot fit in the %zu bytes left (at least %d each); "
                       "beyond end of file (size %zu)",
                       (unsigned long long)n_kv, remain, GGUF_MIN_KV_BYTES, c->size);
    if (n_tensors > remain / GGUF_MIN_TENSOR_INFO_BYTES)
        return pi_fail(PI_E_TRUNCATED,
                       "gguf: header: n_tensors %llu cannot fit in the %zu bytes left (at least %d "
                       "each); beyond end of file (size %zu)",
                       (unsigned long long)n_tensors, remain, GGUF_MIN_TENSOR_INFO_BYTES, c->size);
    f->n_kv = (size_t)n_kv;
    f->n_tensors = (size_t)n_tensors;
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors)
        return pi_fail(PI_E_NOMEM, "gguf: cannot allocate %zu kvs and %zu tensors", f->n_kv,
                       f->n_tensors);
    return 0;
}

static int gguf_parse(struct gguf_file *f)
{
    struct gguf_cur c = {.p = f->base, .size = f->size, .pos = 0, .ctx = "header"};
    int rc;
    if ((rc = parse_header(f, &c)) || (rc = parse_kvs(f, &c)) || (rc = parse_alignment(f)) ||
        (rc = parse_tensors(f, &c)))
        return rc;
    return 0;
}

/* ---- open / close ---- */

void gguf_close(struct gguf_file *f)
{
    if (!f)
        return;
    if (f->kv)
        for (size_t i = 0; i < f->n_kv; i++) {
            free(f->kv[i].key);
            free(f->kv[i].str);
            free(f->kv[i].pool);
            free(f->kv[i].offs);
        }
    if (f->tensors)
        for (size_t i = 0; i < f->n_tensors; i++)
            free((void *)f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    gguf_index_fini(&f->kv_index);
    gguf_index_fini(&f->tensor_index);
    if (f->mapped)
        munmap((void *)f->base, f->map_len);
    free(f);
}

/* map_len > 0: data is a mapping of that many bytes the handle owns (unmapped on any failure too);
 * anon: gguf_open_read's copy */
static int gguf_open_image(struct gguf_file **out, const void *data, size_t size, size_t map_len, bool anon)
{
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        if (map_len)
            munmap((void *)data, map_len);
        return pi_fail(PI_E_NOMEM, "gguf: cannot allocate a file handle");
    }
    f->base = data;
    f->size = size;
    f->mapped = map_len > 0;
    f->map_len = map_len;
    f->anon = anon;
    int rc = gguf_parse(f);
    if (rc) {
        gguf_close(f); /* also unmaps: the handle owns the mapping from here on */
        return rc;
    }
    *out = f;
    return 0;
}

int gguf_open_mem(struct gguf_file **out, const void *data, size_t size)
{
    *out = NULL;
    if (!data && size)
        return pi_fail(PI_E_INVAL, "gguf: NULL image of %zu bytes", size);
    return gguf_open_image(out, data, size, 0, false);
}

/* path opened read-only and checked to be a regular file of at least a header: 0 with *fd, *size */
static int open_file(const char *path, int *fd, size_t *size)
{
    struct stat st;
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return pi_fail(errno, "gguf: cannot open '%s': %s", path, strerror(errno));
    int rc = 0;
    if (fstat(*fd, &st) != 0)
        rc = pi_fail(errno, "gguf: cannot stat '%s': %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = pi_fail(PI_E_INVAL, "gguf: '%s' is not a regular file", path);
    else if (st.st_size < GGUF_HEADER_SIZE)
        rc = pi_fail(PI_E_TRUNCATED, "gguf: '%s': file size %lld is smaller than the %d-byte header",
                     path, (long long)st.st_size, GGUF_HEADER_SIZE);
    if (rc) {
        close(*fd);
        return rc;
    }
    *size = (size_t)st.st_size;
    return 0;
}

int gguf_open(struct gguf_file **out, const char *path)
{
    int fd = -1;
    size_t size = 0;
    *out = NULL;
    int rc = open_file(path, &fd, &size);
    if (rc)
        return rc;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    rc = map == MAP_FAILED ? pi_fail(errno, "gguf: cannot map '%s': %s", path, strerror(errno)) : 0;
    close(fd);
    return rc ? rc : gguf_open_image(out, map, size, size, false);
}

#define HUGE_PAGE ((size_t)2 << 20)
#define READ_CHUNK ((size_t)1 << 30) /* pread returns at most ~2 GiB at once anyway */

/* len bytes of anonymous memory starting on a 2 MiB boundary (Linux 6.1 aligns large anonymous
 * mappings to pages only: map 2 MiB more and trim both ends), or MAP_FAILED */
static uint8_t *map_huge_aligned(size_t len)
{
    uint8_t *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return MAP_FAILED;
    uint8_t *base = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (base > raw)
        munmap(raw, (size_t)(base - raw));
    if (raw + HUGE_PAGE > base)
        munmap(base + len, (size_t)(raw + HUGE_PAGE - base));
    return base;
}

int gguf_open_read(struct gguf_file **out, const char *path)
{
    int fd = -1;
    size_t size = 0;
    *out = NULL;
    int rc = open_file(path, &fd, &size);
    if (rc)
        return rc;
    const size_t len = (size + 4095) & ~(size_t)4095;
    uint8_t *base = map_huge_aligned(len);
    if (base == MAP_FAILED) {
        rc = pi_fail(errno, "gguf: cannot allocate %zu bytes to read '%s' into: %s", size, path, strerror(errno));
        close(fd);
        return rc;
    }
    /* advice before the first touch, so each 2 MiB is faulted in as one huge page; refused
     * (EINVAL without THP) only costs the speed */
    (void)madvise(base, len, MADV_HUGEPAGE);
    for (size_t off = 0; !rc && off < size;) {
        const size_t want = size - off < READ_CHUNK ? size - off : READ_CHUNK;
        const ssize_t n = pread(fd, base + off, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = pi_fail(errno, "gguf: read '%s' at byte %zu: %s", path, off, strerror(errno));
        else if (n == 0)
            rc = pi_fail(PI_E_TRUNCATED, "gguf: '%s' ended at byte %zu while reading %zu (did it shrink?)", path, off, size);
        else
            off += (size_t)n;
    }
    close(fd);
    if (!rc && mprotect(base, len, PROT_READ) != 0) /* weights are read-only: a stray write faults */
        rc = pi_fail(errno, "gguf: mprotect '%s': %s", path, strerror(errno));
    if (rc) {
        munmap(base, len);
        return rc;
    }
    return gguf_open_image(out, base, size, len, true);
}

size_t gguf_huge_bytes(const struct gguf_file *f)
{
    if (!f->anon)
        return 0;
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp)
        return 0;
    char line[256];
    size_t kb = 0;
    bool in = false;
    const uintptr_t want = (uintptr_t)f->base;
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = lo <= want && want < hi;
            continue;
        }
        size_t v;
        if (in && sscanf(line, "AnonHugePages: %zu kB", &v) == 1) {
            kb = v;
            break;
        }
    }
    fclose(fp);
    return kb * 1024;
}

/* ---- file accessors ---- */

uint32_t gguf_magic(const struct gguf_file *f) { return f->magic; }
bool gguf_is_powerinfer(const struct gguf_file *f) { return f->magic == GGUF_MAGIC_PWRI; }
uint32_t gguf_version(const struct gguf_file *f) { return f->version; }
size_t gguf_alignment(const struct gguf_file *f) { return f->alignment; }
const void *gguf_base(const struct gguf_file *f) { return f->base; }
size_t gguf_size(const struct gguf_file *f) { return f->size; }
size_t gguf_data_offset(const struct gguf_file *f) { return f->data_offset; }

/* ---- metadata ---- */

size_t gguf_n_kv(const struct gguf_file *f) { return f->n_kv; }

int64_t gguf_find_key(const struct gguf_file *f, const char *key)
{
    return gguf_index_find(f, &f->kv_index, key, kv_name_at);
}

const char *gguf_kv_key(const struct gguf_file *f, size_t i)
{
    return i < f->n_kv ? f->kv[i].key : NULL;
}

enum gguf_type gguf_kv_type(const struct gguf_file *f, size_t i)
{
    return i < f->n_kv ? f->kv[i].type : GGUF_TYPE_COUNT;
}

const void *gguf_kv_data(const struct gguf_file *f, size_t i)
{
    if (i >= f->n_kv || gguf_type_size(f->kv[i].type) == 0)
        return NULL;
    return f->base + f->kv[i].val_off;
}

static int find_kv(const struct gguf_file *f, const char *key, const struct gguf_kv **kv)
{
    int64_t i = gguf_find_key(f, key);
    if (i < 0)
        return -PI_E_NOTFOUND;
    *kv = &f->kv[i];
    return 0;
}

static int type_error(const struct gguf_kv *kv, const char *want)
{
    return pi_fail(PI_E_TYPE, "gguf: key '%s' has type %s, expected %s", kv->key,
                   gguf_type_name(kv->type), want);
}

/* Integer value as (negative?, magnitude) so any integer type can be range-checked into any other. */
static int kv_int(const struct gguf_kv *kv, const struct gguf_file *f, bool *neg, uint64_t *mag,
                  const char *want)
{
    const uint8_t *p = f->base + kv->val_off;
    int64_t s;
    *neg = false;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: *mag = p[0]; return 0;
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, sizeof v); *mag = v; return 0; }
    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, sizeof v); *mag = v; return 0; }
    case GGUF_TYPE_UINT64: memcpy(mag, p, sizeof *mag); return 0;
    case GGUF_TYPE_INT8: { int8_t v; memcpy(&v, p, sizeof v); s = v; break; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, sizeof v); s = v; break; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, sizeof v); s = v; break; }
    case GGUF_TYPE_INT64: memcpy(&s, p, sizeof s); break;
    default: return type_error(kv, want);
    }
    *neg = s < 0;
    /* magnitude of INT64_MIN is representable in u64: negate in unsigned arithmetic */
    *mag = *neg ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return 0;
}

static int range_error(const struct gguf_kv *kv, bool neg, uint64_t mag, const char *want)
{
    return pi_fail(PI_E_TYPE, "gguf: key '%s': value %s%llu does not fit in %s", kv->key,
                   neg ? "-" : "", (unsigned long long)mag, want);
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out)
{
    const struct gguf_kv *kv;
    bool neg;
    uint64_t mag;
    int rc = find_kv(f, key, &kv);
    if (rc || (rc = kv_int(kv, f, &neg, &mag, "u32")))
        return rc;
    if (neg || mag > UINT32_MAX)
        return range_error(kv, neg, mag, "u32");
    *out = (uint32_t)mag;
    return 0;
}

int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out)
{
    const struct gguf_kv *kv;
    bool neg;
    uint64_t mag;
    int rc = find_kv(f, key, &kv);
    if (rc || (rc = kv_int(kv, f, &neg, &mag, "u64")))
        return rc;
    if (neg)
        return range_error(kv, neg, mag, "u64");
    *out = mag;
    return 0;
}

int gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out)
{
    const struct gguf_kv *kv;
    bool neg;
    uint64_t mag;
    int rc = find_kv(f, key, &kv);
    if (rc || (rc = kv_int(kv, f, &neg, &mag, "i32")))
        return rc;
    if (neg ? mag > (uint64_t)INT32_MAX + 1 : mag > INT32_MAX)
        return range_error(kv, neg, mag, "i32");
    *out = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return 0;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out)
{
    const struct gguf_kv *kv;
    int rc = find_kv(f, key, &kv);
    if (rc)
        return rc;
    const uint8_t *p = f->base + kv->val_off;
    if (kv->type == GGUF_TYPE_FLOAT32) {
        memcpy(out, p, sizeof *out);
        return 0;
    }
    if (kv->type != GGUF_TYPE_FLOAT64)
        return type_error(kv, "f32 or f64");
    double d;
    memcpy(&d, p, sizeof d);
    float v = (float)d;
    if (isfinite(d) && !isfinite(v))
        return pi_fail(PI_E_TYPE, "gguf: key '%s': value %g does not fit in f32", kv->key, d);
    *out = v;
    return 0;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out)
{
    const struct gguf_kv *kv;
    int rc = find_kv(f, key, &kv);
    if (rc)
        return rc;
    if (kv->type != GGUF_TYPE_BOOL)
        return type_error(kv, "bool");
    *out = f->base[kv->val_off] != 0;
    return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key, const char **out)
{
    const struct gguf_kv *kv;
    int rc = find_kv(f, key, &kv);
    if (rc)
        return rc;
    if (kv->type != GGUF_TYPE_STRING)
        return type_error(kv, "string");
    *out = kv->str;
    return 0;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type *elem_type, size_t *n,
                 const void **data)
{
    const struct gguf_kv *kv;
    int rc = find_kv(f, key, &kv);
    if (rc)
        return rc;
    if (kv->type != GGUF_TYPE_ARRAY)
        return type_error(kv, "array");
    *elem_type = kv->elem_type;
    *n = kv->n;
    *data = kv->elem_type == GGUF_TYPE_STRING ? NULL : f->base + kv->val_off;
    return 0;
}

int gguf_get_arr_str(const struct gguf_file *f, const char *key, size_t i, const char **s, size_t *len)
{
    const struct gguf_kv *kv;
    int rc = find_kv(f, key, &kv);
    if (rc)
        return rc;
    if (kv->type != GGUF_TYPE_ARRAY || kv->elem_type != GGUF_TYPE_STRING)
        return pi_fail(PI_E_TYPE, "gguf: key '%s' is not an array of strings", kv->key);
    if (i >= kv->n)
        return pi_fail(PI_E_RANGE, "gguf: key '%s': index %zu beyond the %zu strings", kv->key, i,
                       kv->n);
    *s = kv->pool + kv->offs[i];
    *len = kv->offs[i + 1] - kv->offs[i] - 1; /* minus the NUL */
    return 0;
}

/* ---- tensors ---- */

size_t gguf_n_tensors(const struct gguf_file *f) { return f->n_tensors; }

const struct gguf_tensor *gguf_tensor(const struct gguf_file *f, size_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
    int64_t r = gguf_index_find(f, &f->tensor_index, name, tensor_name_at);
    return r < 0 ? NULL : &f->tensors[r];
}
