/* fuzz_safetensors — any bytes as a safetensors file (tools/convert/safetensors.c): u64 header
 * length, JSON header, data.
 *
 * The file is written to a private tmpfs directory and opened by st_open_file (mmap), as the
 * converter does. Oracles, checked against the header as this target reads it independently: each
 * accepted tensor's bytes are exactly data_offsets [begin, end) of the data section, end - begin
 * is dtype size × the product of its shape, the set is sorted and st_find finds each name; every
 * element is converted to f32. */
#include <jansson.h>

#include "fuzz_util.h"
#include "safetensors.h"

#define LEN_BYTES 8

/* The bytes the header says tensor `name` occupies, or NULL. */
static const uint8_t *expected_bytes(json_t *hdr, const char *name, const uint8_t *data, size_t data_size,
                                     size_t *len)
{
    json_t *off = json_object_get(json_object_get(hdr, name), "data_offsets");
    json_int_t b = json_integer_value(json_array_get(off, 0)), e = json_integer_value(json_array_get(off, 1));
    if (b < 0 || e < b || (uint64_t)e > data_size)
        return NULL;
    *len = (size_t)(e - b);
    return data + b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_put_file("model.safetensors", data, size, path, sizeof path);
    struct st_set *s;
    if (st_open_file(&s, path))
        return 0;
    FUZZ_CHECK(size >= LEN_BYTES);
    uint64_t hlen = 0;
    for (int i = 0; i < LEN_BYTES; i++)
        hlen |= (uint64_t)data[i] << (8 * i);
    FUZZ_CHECK(hlen <= size - LEN_BYTES);
    json_t *hdr = json_loadb((const char *)data + LEN_BYTES, (size_t)hlen, 0, NULL);
    FUZZ_CHECK(json_is_object(hdr));
    const uint8_t *dsec = data + LEN_BYTES + hlen;
    const size_t dsize = size - LEN_BYTES - (size_t)hlen;

    float buf[256];
    for (size_t i = 0; i < st_n_tensors(s); i++) {
        const struct st_tensor *t = st_tensor_at(s, i);
        FUZZ_CHECK(t && t->name && st_find(s, t->name) == t);
        FUZZ_CHECK(i == 0 || strcmp(st_tensor_at(s, i - 1)->name, t->name) < 0);
        FUZZ_CHECK(t->n_dims >= 0 && t->n_dims <= ST_MAX_DIMS);
        int64_t nel = 1;
        for (int d = 0; d < t->n_dims; d++) {
            FUZZ_CHECK(t->shape[d] >= 0);
            FUZZ_CHECK(!__builtin_mul_overflow(nel, t->shape[d], &nel));
        }
        FUZZ_CHECK(nel == t->n_elems);
        FUZZ_CHECK((uint64_t)t->n_elems * st_dtype_size(t->dtype) == t->nbytes);
        size_t want_len = 0;
        const uint8_t *want = expected_bytes(hdr, t->name, dsec, dsize, &want_len);
        FUZZ_CHECK(want != NULL && want_len == t->nbytes);
        FUZZ_CHECK(memcmp(want, t->data, t->nbytes) == 0);
        for (int64_t e = 0; e < t->n_elems; e += 256) {
            int64_t k = t->n_elems - e < 256 ? t->n_elems - e : 256;
            st_read_f32(t, e, k, buf);
        }
    }
    json_decref(hdr);
    st_close(s);
    return 0;
}
