/* fuzz_gguf — any bytes as a whole GGUF file image (header, metadata, tensor infos, data).
 *
 * gguf_open_mem must refuse a malformed image with an error code, never read outside it; on
 * success every accessor is exercised and cross-checked: each key and tensor is found by its own
 * name, every tensor's data extent lies inside the data section (its bytes are all read, so ASan
 * sees an extent that leaves the image), and the tokenizer is built from the metadata when the
 * image has one (refusing is fine, crashing is not). Seeds: fuzz/corpus/gguf/ (scripts/fuzz-seeds.py
 * cuts them from the project's GGUF, with the shapes shrunk). */
#include "fuzz_util.h"
#include "gguf.h"
#include "quant.h"
#include "tokenizer.h"

#define FUZZ_MAX_ROW 4096 /* longest first row converted to float (elements) */

static void check_kv(const struct gguf_file *f, size_t i)
{
    const char *key = gguf_kv_key(f, i);
    FUZZ_CHECK(key != NULL);
    FUZZ_CHECK(gguf_find_key(f, key) == (int64_t)i);
    enum gguf_type t = gguf_kv_type(f, i);
    FUZZ_CHECK(t < GGUF_TYPE_COUNT);
    const uint8_t *raw = gguf_kv_data(f, i);
    FUZZ_CHECK((raw != NULL) == (gguf_type_size(t) != 0));
    volatile uint8_t sink = 0;
    for (size_t b = 0; raw && b < gguf_type_size(t); b++)
        sink ^= raw[b];
    (void)sink;

    /* Every typed getter on every key: each must answer 0 or a negative code, whatever the type. */
    uint32_t u32;
    uint64_t u64;
    int32_t i32;
    float f32;
    bool bl;
    const char *s;
    (void)gguf_get_u32(f, key, &u32);
    (void)gguf_get_u64(f, key, &u64);
    (void)gguf_get_i32(f, key, &i32);
    (void)gguf_get_f32(f, key, &f32);
    (void)gguf_get_bool(f, key, &bl);
    if (gguf_get_str(f, key, &s) == 0)
        FUZZ_CHECK(t == GGUF_TYPE_STRING && s != NULL);

    enum gguf_type et;
    size_t n;
    const void *arr;
    if (gguf_get_arr(f, key, &et, &n, &arr) == 0) {
        FUZZ_CHECK(t == GGUF_TYPE_ARRAY);
        if (et == GGUF_TYPE_STRING) {
            for (size_t k = 0; k < n; k++) {
                size_t len;
                FUZZ_CHECK(gguf_get_arr_str(f, key, k, &s, &len) == 0);
                FUZZ_CHECK(s[len] == '\0');
            }
            FUZZ_CHECK(gguf_get_arr_str(f, key, n, &s, NULL) < 0);
        } else {
            const size_t es = gguf_type_size(et);
            FUZZ_CHECK(es != 0);
            const uint8_t *p = arr, *base = gguf_base(f);
            FUZZ_CHECK(n == 0 || (p >= base && (size_t)(p - base) + n * es <= gguf_size(f)));
        }
    }
}

static void check_tensor(const struct gguf_file *f, size_t i)
{
    const struct gguf_tensor *t = gguf_tensor(f, i);
    FUZZ_CHECK(t != NULL && t->name != NULL);
    FUZZ_CHECK(gguf_find_tensor(f, t->name) == t);
    FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
    const struct pi_type_traits *tr = quant_traits(t->type);
    FUZZ_CHECK(tr != NULL);
    int64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        FUZZ_CHECK(t->ne[d] >= 0);
        FUZZ_CHECK(d < (int)t->n_dims || t->ne[d] == 1);
        FUZZ_CHECK(!__builtin_mul_overflow(nel, t->ne[d], &nel));
    }
    FUZZ_CHECK((size_t)(nel / tr->blck_size) * tr->type_size == t->nbytes);
    FUZZ_CHECK(t->offset % gguf_alignment(f) == 0);
    const uint8_t *p = t->data, *data = (const uint8_t *)gguf_base(f) + gguf_data_offset(f);
    const uint8_t *end = (const uint8_t *)gguf_base(f) + gguf_size(f);
    FUZZ_CHECK(p == data + t->offset);
    FUZZ_CHECK(p <= end && t->nbytes <= (size_t)(end - p));
    volatile uint8_t sink = 0;
    for (size_t b = 0; b < t->nbytes; b++)
        sink ^= p[b];
    (void)sink;
    /* The first row through the type's to_float kernel (any bit pattern: NaN, inf, denormals). */
    if (tr->to_float && t->nbytes && t->ne[0] <= FUZZ_MAX_ROW) {
        static float row[FUZZ_MAX_ROW];
        tr->to_float(p, row, t->ne[0]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf_file *f;
    if (gguf_open_mem(&f, data, size))
        return 0;
    FUZZ_CHECK(gguf_size(f) == size && gguf_base(f) == data);
    FUZZ_CHECK(gguf_magic(f) == GGUF_MAGIC_GGUF || gguf_magic(f) == GGUF_MAGIC_PWRI);
    const size_t align = gguf_alignment(f);
    FUZZ_CHECK(align > 0 && gguf_data_offset(f) % align == 0);
    for (size_t i = 0; i < gguf_n_kv(f); i++)
        check_kv(f, i);
    FUZZ_CHECK(gguf_kv_key(f, gguf_n_kv(f)) == NULL && gguf_kv_type(f, gguf_n_kv(f)) == GGUF_TYPE_COUNT);
    for (size_t i = 0; i < gguf_n_tensors(f); i++)
        check_tensor(f, i);
    FUZZ_CHECK(gguf_tensor(f, gguf_n_tensors(f)) == NULL);

    struct pi_tokenizer *tok;
    if (tok_new_from_gguf(&tok, f) == 0) {
        /* A tokenizer the metadata built must encode and decode a short text. */
        static const char text[] = "Hello, world! <s> 12345\n\xff";
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(tok, text, sizeof text - 1, true, true, &ids, &n) == 0) {
            for (size_t k = 0; k < n; k++)
                FUZZ_CHECK(ids[k] >= 0 && ids[k] < tok_n_vocab(tok));
            char *out = NULL;
            size_t len;
            if (tok_decode(tok, ids, n, true, &out, &len) == 0)
                FUZZ_CHECK(out[len] == '\0');
            free(out);
        }
        free(ids);
        tok_free(tok);
    }
    gguf_close(f);
    return 0;
}
