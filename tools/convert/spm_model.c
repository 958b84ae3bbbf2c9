/* spm_model.c — a minimal protobuf wire-format reader for SentencePiece's ModelProto.
 *
 * Wire format: each field is a varint tag (field_number << 3 | wire_type) followed by a value:
 * 0 varint, 1 fixed 64-bit, 2 length-delimited (varint length + bytes), 5 fixed 32-bit. Groups
 * (3/4) are obsolete and never used by sentencepiece, so they are rejected. Unknown fields are
 * skipped; every length is checked against the enclosing message before it is used. Offsets in
 * error messages are from the start of the file. */
#include "spm_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pi_err.h"

enum pb_wire { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };

#define PB_WIRE_BITS 3
#define PB_WIRE_MASK 7u
#define PB_VARINT_MAX_BYTES 10 /* 64 bits / 7 bits per byte, rounded up */

/* ModelProto field numbers (sentencepiece_model.proto). */
enum {
    SPM_F_PIECES = 1,
    SPM_F_TRAINER = 2,
    SPM_F_NORMALIZER = 3,
};
enum { SPM_PIECE_F_PIECE = 1, SPM_PIECE_F_SCORE = 2, SPM_PIECE_F_TYPE = 3 };
enum {
    SPM_TRAINER_F_MODEL_TYPE = 3,
    SPM_TRAINER_F_BYTE_FALLBACK = 35,
    SPM_TRAINER_F_UNK_ID = 40,
    SPM_TRAINER_F_BOS_ID = 41,
    SPM_TRAINER_F_EOS_ID = 42,
    SPM_TRAINER_F_PAD_ID = 43,
};
enum { SPM_NORM_F_NAME = 1, SPM_NORM_F_DUMMY_PREFIX = 3, SPM_NORM_F_REMOVE_WS = 4 };

/* Defaults from sentencepiece_model.proto, used when a field is absent. */
#define SPM_DEFAULT_MODEL_TYPE 1 /* UNIGRAM */
#define SPM_DEFAULT_UNK 0
#define SPM_DEFAULT_BOS 1
#define SPM_DEFAULT_EOS 2
#define SPM_DEFAULT_PAD (-1)
#define SPM_TYPE_NORMAL 1
#define SPM_TYPE_MAX 6 /* BYTE */

/* A message being read: bytes [pos, end) of the file image at base. */
struct pb_reader {
    const uint8_t *base;
    size_t pos, end;
    const char *msg; /* message name for errors */
};

/* One decoded field: value is the varint/fixed payload, or (off, len) of a length-delimited one. */
struct pb_field {
    uint32_t num;
    enum pb_wire wire;
    uint64_t value;
    size_t off, len;
    size_t tag_off;
};

static int pb_varint(struct pb_reader *r, uint64_t *out, const char *what)
{
    uint64_t v = 0;
    size_t start = r->pos;
    for (int i = 0; i < PB_VARINT_MAX_BYTES; i++) {
        if (r->pos >= r->end)
            return pi_fail(PI_E_FORMAT, "spm: %s %s: varint at offset %zu runs past the end (%zu)",
                           r->msg, what, start, r->end);
        uint8_t b = r->base[r->pos++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return pi_fail(PI_E_FORMAT, "spm: %s %s: varint at offset %zu longer than %d bytes", r->msg, what,
                   start, PB_VARINT_MAX_BYTES);
}

/* Read the next field of r. Returns 1 with *f filled, 0 at the end of the message, or an error. */
static int pb_next(struct pb_reader *r, struct pb_field *f)
{
    if (r->pos >= r->end)
        return 0;
    uint64_t tag;
    int rc;
    f->tag_off = r->pos;
    if ((rc = pb_varint(r, &tag, "field tag")) < 0)
        return rc;
    f->num = (uint32_t)(tag >> PB_WIRE_BITS);
    f->wire = (enum pb_wire)(tag & PB_WIRE_MASK);
    if (f->num == 0 || tag >> PB_WIRE_BITS > UINT32_MAX)
        return pi_fail(PI_E_FORMAT, "spm: %s: invalid field number %llu at offset %zu", r->msg,
                       (unsigned long long)(tag >> PB_WIRE_BITS), f->tag_off);
    f->value = 0;
    f->off = f->len = 0;
    switch (f->wire) {
    case PB_VARINT:
        return (rc = pb_varint(r, &f->value, "varint field")) < 0 ? rc : 1;
    case PB_FIXED64:
    case PB_FIXED32: {
        size_t n = f->wire == PB_FIXED64 ? 8 : 4;
        if (r->end - r->pos < n)
            return pi_fail(PI_E_FORMAT, "spm: %s field %u: %zu-byte value at offset %zu runs past the end (%zu)",
                           r->msg, f->num, n, r->pos, r->end);
        for (size_t i = 0; i < n; i++)
            f->value |= (uint64_t)r->base[r->pos + i] << (8 * i);
        r->pos += n;
        return 1;
    }
    case PB_LEN: {
        uint64_t len;
        if ((rc = pb_varint(r, &len, "length")) < 0)
            return rc;
        if (len > r->end - r->pos)
            return pi_fail(PI_E_FORMAT, "spm: %s field %u: length %llu at offset %zu exceeds the %zu bytes left",
                           r->msg, f->num, (unsigned long long)len, f->tag_off, r->end - r->pos);
        f->off = r->pos;
        f->len = (size_t)len;
        r->pos += (size_t)len;
        return 1;
    }
    default:
        return pi_fail(PI_E_FORMAT, "spm: %s field %u: unsupported wire type %d at offset %zu", r->msg, f->num,
                       (int)f->wire, f->tag_off);
    }
}

static int pb_expect(const struct pb_reader *r, const struct pb_field *f, enum pb_wire wire, const char *name)
{
    if (f->wire != wire)
        return pi_fail(PI_E_FORMAT, "spm: %s.%s (field %u) at offset %zu: wire type %d, expected %d", r->msg, name,
                       f->num, f->tag_off, (int)f->wire, (int)wire);
    return 0;
}

static struct pb_reader pb_sub(const struct pb_reader *r, const struct pb_field *f, const char *msg)
{
    return (struct pb_reader){.base = r->base, .pos = f->off, .end = f->off + f->len, .msg = msg};
}

/* protobuf int32 is sign-extended to 64 bits on the wire. */
static int pb_int32(const struct pb_reader *r, const struct pb_field *f, const char *name, int32_t *out)
{
    int64_t v = (int64_t)f->value;
    int rc = pb_expect(r, f, PB_VARINT, name);
    if (rc < 0)
        return rc;
    if (v < INT32_MIN || v > INT32_MAX)
        return pi_fail(PI_E_FORMAT, "spm: %s.%s at offset %zu: value %lld does not fit int32", r->msg, name,
                       f->tag_off, (long long)v);
    *out = (int32_t)v;
    return 0;
}

static int pb_string(const struct pb_reader *r, const struct pb_field *f, const char *name, char **out)
{
    int rc = pb_expect(r, f, PB_LEN, name);
    if (rc < 0)
        return rc;
    if (memchr(r->base + f->off, 0, f->len))
        return pi_fail(PI_E_FORMAT, "spm: %s.%s at offset %zu contains a NUL byte", r->msg, name, f->tag_off);
    char *s = malloc(f->len + 1);
    if (!s)
        return pi_fail(PI_E_NOMEM, "spm: %s.%s: out of memory", r->msg, name);
    memcpy(s, r->base + f->off, f->len);
    s[f->len] = 0;
    free(*out);
    *out = s;
    return 0;
}

static int spm_parse_piece(struct spm_model *m, struct pb_reader *r, size_t idx)
{
    struct pb_field f;
    int rc;
    m->pieces[idx] = NULL;
    m->scores[idx] = 0.0f;
    m->types[idx] = SPM_TYPE_NORMAL;
    while ((rc = pb_next(r, &f)) > 0) {
        if (f.num == SPM_PIECE_F_PIECE) {
            if ((rc = pb_string(r, &f, "piece", &m->pieces[idx])) < 0)
                return rc;
        } else if (f.num == SPM_PIECE_F_SCORE) {
            if ((rc = pb_expect(r, &f, PB_FIXED32, "score")) < 0)
                return rc;
            uint32_t bits = (uint32_t)f.value;
            memcpy(&m->scores[idx], &bits, sizeof bits);
        } else if (f.num == SPM_PIECE_F_TYPE) {
            int32_t t;
            if ((rc = pb_int32(r, &f, "type", &t)) < 0)
                return rc;
            if (t < SPM_TYPE_NORMAL || t > SPM_TYPE_MAX)
                return pi_fail(PI_E_FORMAT, "spm: piece %zu type %d at offset %zu out of range 1..%d", idx, t,
                               f.tag_off, SPM_TYPE_MAX);
            m->types[idx] = t;
        }
    }
    if (rc < 0)
        return rc;
    if (!m->pieces[idx])
        return pi_fail(PI_E_FORMAT, "spm: piece %zu (message ending at offset %zu) has no piece string", idx, r->end);
    return 0;
}

static int spm_parse_trainer(struct spm_model *m, struct pb_reader *r)
{
    struct pb_field f;
    int rc;
    while ((rc = pb_next(r, &f)) > 0) {
        int32_t v;
        switch (f.num) {
        case SPM_TRAINER_F_MODEL_TYPE:
            if ((rc = pb_int32(r, &f, "model_type", &v)) < 0)
                return rc;
            m->model_type = v;
            break;
        case SPM_TRAINER_F_BYTE_FALLBACK:
            if ((rc = pb_expect(r, &f, PB_VARINT, "byte_fallback")) < 0)
                return rc;
            m->byte_fallback = f.value != 0;
            break;
        case SPM_TRAINER_F_UNK_ID:
            if ((rc = pb_int32(r, &f, "unk_id", &m->unk_id)) < 0)
                return rc;
            break;
        case SPM_TRAINER_F_BOS_ID:
            if ((rc = pb_int32(r, &f, "bos_id", &m->bos_id)) < 0)
                return rc;
            break;
        case SPM_TRAINER_F_EOS_ID:
            if ((rc = pb_int32(r, &f, "eos_id", &m->eos_id)) < 0)
                return rc;
            break;
        case SPM_TRAINER_F_PAD_ID:
            if ((rc = pb_int32(r, &f, "pad_id", &m->pad_id)) < 0)
                return rc;
            break;
        default:
            break;
        }
    }
    return rc;
}

static int spm_parse_normalizer(struct spm_model *m, struct pb_reader *r)
{
    struct pb_field f;
    int rc;
    while ((rc = pb_next(r, &f)) > 0) {
        if (f.num == SPM_NORM_F_NAME) {
            if ((rc = pb_string(r, &f, "name", &m->normalizer_name)) < 0)
                return rc;
        } else if (f.num == SPM_NORM_F_DUMMY_PREFIX) {
            if ((rc = pb_expect(r, &f, PB_VARINT, "add_dummy_prefix")) < 0)
                return rc;
            m->add_dummy_prefix = f.value != 0;
        } else if (f.num == SPM_NORM_F_REMOVE_WS) {
            if ((rc = pb_expect(r, &f, PB_VARINT, "remove_extra_whitespaces")) < 0)
                return rc;
            m->remove_extra_whitespaces = f.value != 0;
        }
    }
    return rc;
}

/* Count top-level pieces first so that the arrays are allocated once. */
static int spm_count_pieces(const struct pb_reader *top, size_t *n)
{
    struct pb_reader r = *top;
    struct pb_field f;
    int rc;
    *n = 0;
    while ((rc = pb_next(&r, &f)) > 0) {
        if (f.num == SPM_F_PIECES) {
            if ((rc = pb_expect(&r, &f, PB_LEN, "pieces")) < 0)
                return rc;
            (*n)++;
        }
    }
    return rc;
}

int spm_model_parse(struct spm_model *m, const void *data, size_t size)
{
    struct pb_reader top = {.base = data, .pos = 0, .end = size, .msg = "ModelProto"};
    struct pb_field f;
    size_t n, idx = 0;
    int rc;

    memset(m, 0, sizeof *m);
    m->model_type = SPM_DEFAULT_MODEL_TYPE;
    m->add_dummy_prefix = true;
    m->remove_extra_whitespaces = true;
    m->unk_id = SPM_DEFAULT_UNK;
    m->bos_id = SPM_DEFAULT_BOS;
    m->eos_id = SPM_DEFAULT_EOS;
    m->pad_id = SPM_DEFAULT_PAD;

    if ((rc = spm_count_pieces(&top, &n)) < 0)
        goto fail;
    if (n == 0) {
        rc = pi_fail(PI_E_FORMAT, "spm: ModelProto has no pieces (field 1) in %zu bytes", size);
        goto fail;
    }
    m->pieces = calloc(n, sizeof *m->pieces);
    m->scores = calloc(n, sizeof *m->scores);
    m->types = calloc(n, sizeof *m->types);
    if (!m->pieces || !m->scores || !m->types) {
        rc = pi_fail(PI_E_NOMEM, "spm: out of memory for %zu pieces", n);
        goto fail;
    }
    m->n = n;
    while ((rc = pb_next(&top, &f)) > 0) {
        struct pb_reader sub;
        if (f.num == SPM_F_PIECES) {
            sub = pb_sub(&top, &f, "SentencePiece");
            if ((rc = spm_parse_piece(m, &sub, idx++)) < 0)
                goto fail;
        } else if (f.num == SPM_F_TRAINER) {
            if ((rc = pb_expect(&top, &f, PB_LEN, "trainer_spec")) < 0)
                goto fail;
            sub = pb_sub(&top, &f, "TrainerSpec");
            if ((rc = spm_parse_trainer(m, &sub)) < 0)
                goto fail;
        } else if (f.num == SPM_F_NORMALIZER) {
            if ((rc = pb_expect(&top, &f, PB_LEN, "normalizer_spec")) < 0)
                goto fail;
            sub = pb_sub(&top, &f, "NormalizerSpec");
            if ((rc = spm_parse_normalizer(m, &sub)) < 0)
                goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    if (!m->normalizer_name && !(m->normalizer_name = strdup(""))) {
        rc = pi_fail(PI_E_NOMEM, "spm: out of memory");
        goto fail;
    }
    /* Special ids must name pieces, or be -1 (none). */
    const int32_t ids[] = {m->unk_id, m->bos_id, m->eos_id, m->pad_id};
    const char *names[] = {"unk_id", "bos_id", "eos_id", "pad_id"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        if (ids[i] < -1 || (ids[i] >= 0 && (size_t)ids[i] >= n)) {
            rc = pi_fail(PI_E_FORMAT, "spm: TrainerSpec.%s %d out of range for %zu pieces", names[i], ids[i], n);
            goto fail;
        }
    }
    return 0;
fail:
    spm_model_fini(m);
    return rc;
}

int spm_model_load(struct spm_model *m, const char *path)
{
    FILE *fp = NULL;
    void *buf = NULL;
    struct stat st;
    int rc;

    memset(m, 0, sizeof *m);
    if (!(fp = fopen(path, "rb"))) {
        rc = pi_fail(errno, "spm: cannot open '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(fileno(fp), &st) < 0) {
        rc = pi_fail(errno, "spm: cannot stat '%s': %s", path, strerror(errno));
        goto fail;
    }
    size_t size = (size_t)st.st_size;
    if (!(buf = malloc(size ? size : 1))) {
        rc = pi_fail(PI_E_NOMEM, "spm: out of memory reading '%s' (%zu bytes)", path, size);
        goto fail;
    }
    if (fread(buf, 1, size, fp) != size) {
        rc = pi_fail(PI_E_IO, "spm: short read on '%s'", path);
        goto fail;
    }
    rc = spm_model_parse(m, buf, size);
fail:
    free(buf);
    if (fp)
        fclose(fp);
    return rc;
}

void spm_model_fini(struct spm_model *m)
{
    if (m->pieces)
        for (size_t i = 0; i < m->n; i++)
            free(m->pieces[i]);
    free(m->pieces);
    free(m->scores);
    free(m->types);
    free(m->normalizer_name);
    memset(m, 0, sizeof *m);
}
