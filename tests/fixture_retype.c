/* fixture_retype — the test suite's typed models (f32, q8_0, q4_0), derived at build time from the
 * embedded models/tiny-relu-llama-f16.gguf, so that no test needs ../shared for them.
 *
 * The rule is the converter's (tools/convert): 2-D weights get the output type, 1-D tensors (norms)
 * stay F32, general.file_type names the output type, keys and tensor order are kept. The Hugging
 * Face checkpoint is itself F16, so f16 -> f32 -> TYPE here quantizes the same floats as
 * `pictl convert HF_DIR --type TYPE`; test_convert checks the files are byte-identical when
 * ../shared is present.
 *
 * usage: fixture_retype IN.gguf OUT.gguf TYPE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "pi_err.h"
#include "quant.h"

/* general.file_type values (ggml's llama_ftype) of the types the converter writes */
static int file_type_of(int type, uint32_t *out)
{
    switch (type) {
    case PI_TYPE_F32: *out = 0; return 0;
    case PI_TYPE_F16: *out = 1; return 0;
    case PI_TYPE_Q4_0: *out = 2; return 0;
    case PI_TYPE_Q8_0: *out = 7; return 0;
    case PI_TYPE_BF16: *out = 32; return 0;
    default: return pi_fail(PI_E_INVAL, "type %d is not one the converter writes", type);
    }
}

static int retype(const char *in, const char *out, int type)
{
    struct gguf_file *f = NULL;
    struct gguf_writer *w = NULL;
    float *row = NULL;
    char *buf = NULL;
    uint32_t ftype;
    int rc = file_type_of(type, &ftype);
    if (rc || (rc = gguf_open(&f, in)) || (rc = gguf_writer_new(&w, gguf_magic(f))) ||
        (rc = gguf_writer_copy_kv(w, f)) || (rc = gguf_writer_set_u32(w, "general.file_type", ftype)))
        goto out;
    const size_t n = gguf_n_tensors(f);
    for (size_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        const uint32_t to = t->n_dims >= 2 ? (uint32_t)type : t->type;
        if ((rc = gguf_writer_add_tensor(w, t->name, to, t->n_dims, t->ne, NULL)))
            goto out;
    }
    if ((rc = gguf_writer_open(w, out)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        const uint32_t to = t->n_dims >= 2 ? (uint32_t)type : t->type;
        if (to == t->type) {
            if ((rc = gguf_writer_write_tensor(w, t->data)))
                goto out;
            continue;
        }
        const int64_t ne0 = t->ne[0], rows = (int64_t)(t->nbytes / quant_row_size(t->type, ne0));
        const size_t in_row = quant_row_size(t->type, ne0), out_row = quant_row_size(to, ne0);
        if (in_row == 0 || out_row == 0) {
            rc = pi_fail(PI_E_UNSUPPORTED, "tensor '%s': rows of %lld cannot be stored as %s", t->name,
                         (long long)ne0, quant_traits(to)->name);
            goto out;
        }
        free(row);
        free(buf);
        row = malloc(sizeof(float) * (size_t)ne0);
        buf = malloc(out_row * (size_t)rows);
        if (!row || !buf) {
            rc = pi_fail(PI_E_NOMEM, "tensor '%s' too large", t->name);
            goto out;
        }
        for (int64_t r = 0; r < rows; r++) {
            quant_traits(t->type)->to_float((const char *)t->data + in_row * (size_t)r, row, ne0);
            quant_traits(to)->from_float(row, buf + out_row * (size_t)r, ne0);
        }
        if ((rc = gguf_writer_write_tensor(w, buf)))
            goto out;
    }
    rc = gguf_writer_close(w);
out:
    free(row);
    free(buf);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: fixture_retype IN.gguf OUT.gguf f32|f16|bf16|q8_0|q4_0\n");
        return 2;
    }
    quant_init();
    const int type = quant_type_from_name(argv[3]);
    int rc = type < 0 ? pi_fail(PI_E_INVAL, "unknown type '%s'", argv[3]) : retype(argv[1], argv[2], type);
    if (rc) {
        fprintf(stderr, "fixture_retype: %s: %s\n", pi_strerror(rc), pi_errmsg());
        return 1;
    }
    return 0;
}
