/* test_model_validate — hyperparameters and tensor extents that would load and compute garbage are
 * refused at load with a message naming them (issue 7, item 8): NaN, negative or zero RMS epsilon;
 * NaN or zero RoPE base; a vocab_size that disagrees with the embedding; tensors for more layers than
 * block_count; two tensors sharing data bytes. Each variant is the embedded tiny model re-written
 * with one value changed (or one offset patched); the unchanged re-write must still load.
 *
 * usage: test_model_validate MODEL_F16.gguf */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "model.h"
#include "pi_err.h"
#include "testutil.h"

static char tmpdir[256];

enum change { CH_NONE, CH_F32, CH_U32 };

/* Re-write SRC into tmpdir/NAME with key set to the given value (CH_NONE: unchanged). */
static void rewrite(const struct gguf_file *src, const char *path, enum change ch, const char *key, float fv,
                    uint32_t uv)
{
    struct gguf_writer *w = NULL;
    CHECK_OK(gguf_writer_new(&w, gguf_magic(src)));
    CHECK_OK(gguf_writer_copy_kv(w, src));
    if (ch == CH_F32)
        CHECK_OK(gguf_writer_set_f32(w, key, fv));
    else if (ch == CH_U32)
        CHECK_OK(gguf_writer_set_u32(w, key, uv));
    for (size_t i = 0; i < gguf_n_tensors(src); i++) {
        const struct gguf_tensor *t = gguf_tensor(src, i);
        CHECK_OK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data));
    }
    CHECK_OK(gguf_writer_write_file(w, path));
    gguf_writer_free(w);
}

static void expect_load(const char *what, const char *path, int want_rc, const char *needle)
{
    struct pi_model *m = NULL;
    pi_errmsg_clear();
    int rc = model_load(&m, path);
    if (want_rc == 0) {
        CHECK(rc == 0, "%s: load failed: %d %s", what, rc, pi_errmsg());
    } else {
        CHECK(rc == -want_rc, "%s: rc %d (%s), expected %d", what, rc, pi_errmsg(), -want_rc);
        CHECK(strstr(pi_errmsg(), needle) != NULL, "%s: message '%s' lacks '%s'", what, pi_errmsg(), needle);
        fprintf(stderr, "%s -> %s\n", what, pi_errmsg());
    }
    model_free(m);
}

/* The file offset of tensor NAME's data-offset field: after its gguf string name, u32 n_dims,
 * n_dims u64 extents and the u32 type. */
static long offset_field(const uint8_t *img, size_t n, const char *name, uint32_t n_dims)
{
    const size_t len = strlen(name);
    for (size_t i = 8; i + len + 4 <= n; i++) {
        uint64_t l;
        memcpy(&l, img + i - 8, 8);
        if (l == len && !memcmp(img + i, name, len))
            return (long)(i + len + 4 + 8 * (size_t)n_dims + 4);
    }
    return -1;
}

static void test_overlap(const char *good, const struct gguf_file *src)
{
    FILE *f = fopen(good, "rb");
    REQUIRE(f, "open %s", good);
    fseek(f, 0, SEEK_END);
    const size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *img = malloc(n);
    REQUIRE(img && fread(img, 1, n, f) == n, "read %s", good);
    fclose(f);
    /* point the second tensor's data at the first's */
    const struct gguf_tensor *t0 = gguf_tensor(src, 0), *t1 = gguf_tensor(src, 1);
    long at = offset_field(img, n, t1->name, t1->n_dims);
    REQUIRE(at > 0, "tensor info of '%s' not found", t1->name);
    uint64_t was;
    memcpy(&was, img + at, 8);
    CHECK(was == t1->offset, "found the offset field of '%s' (%llu, want %llu)", t1->name, (unsigned long long)was,
          (unsigned long long)t1->offset);
    memcpy(img + at, &t0->offset, 8);
    char path[512];
    snprintf(path, sizeof path, "%s/overlap.gguf", tmpdir);
    f = fopen(path, "wb");
    REQUIRE(f && fwrite(img, 1, n, f) == n, "write %s", path);
    fclose(f);
    free(img);
    expect_load("overlapping tensor data", path, PI_E_FORMAT, "overlap");
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        SKIP("usage: test_model_validate MODEL_F16.gguf");
    snprintf(tmpdir, sizeof tmpdir, "%s/pinfer-validate-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    REQUIRE(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
    struct gguf_file *src = NULL;
    REQUIRE(gguf_open(&src, argv[1]) == 0, "open %s: %s", argv[1], pi_errmsg());
    const char *arch = NULL;
    REQUIRE(gguf_get_str(src, "general.architecture", &arch) == 0, "architecture");
    uint32_t n_layer = 0;
    char k_eps[96], k_rope[96], k_vocab[96], k_blocks[96];
    snprintf(k_eps, sizeof k_eps, "%s.attention.layer_norm_rms_epsilon", arch);
    snprintf(k_rope, sizeof k_rope, "%s.rope.freq_base", arch);
    snprintf(k_vocab, sizeof k_vocab, "%s.vocab_size", arch);
    snprintf(k_blocks, sizeof k_blocks, "%s.block_count", arch);
    REQUIRE(gguf_get_u32(src, k_blocks, &n_layer) == 0 && n_layer > 1, "block_count");
    const struct gguf_tensor *emb = gguf_find_tensor(src, "token_embd.weight");
    REQUIRE(emb, "token_embd.weight");

    static const struct {
        const char *what;
        enum change ch;
        int key; /* 0 eps, 1 rope, 2 vocab, 3 blocks */
        float fv;
        long uv_delta;
        int rc;
        const char *needle;
    } cases[] = {
        { "unchanged", CH_NONE, 0, 0, 0, 0, "" },
        { "rms eps NaN", CH_F32, 0, NAN, 0, PI_E_RANGE, "layer_norm_rms_epsilon = nan" },
        { "rms eps negative", CH_F32, 0, -1e-5f, 0, PI_E_RANGE, "layer_norm_rms_epsilon = -1e-05" },
        { "rms eps zero", CH_F32, 0, 0.0f, 0, PI_E_RANGE, "layer_norm_rms_epsilon = 0" },
        { "rms eps infinite", CH_F32, 0, INFINITY, 0, PI_E_RANGE, "layer_norm_rms_epsilon = inf" },
        { "rope base NaN", CH_F32, 1, NAN, 0, PI_E_RANGE, "rope.freq_base = nan" },
        { "rope base zero", CH_F32, 1, 0.0f, 0, PI_E_RANGE, "rope.freq_base = 0" },
        { "rope base negative", CH_F32, 1, -10000.0f, 0, PI_E_RANGE, "rope.freq_base = -10000" },
        { "vocab_size > embedding", CH_U32, 2, 0, 1, PI_E_TYPE, "vocab_size" },
        { "vocab_size < embedding", CH_U32, 2, 0, -1, PI_E_TYPE, "vocab_size" },
        { "vocab_size = embedding", CH_U32, 2, 0, 0, 0, "" },
        { "more layers than block_count", CH_U32, 3, 0, -1, PI_E_RANGE, "but llama.block_count is" },
    };
    const char *keys[] = { k_eps, k_rope, k_vocab, k_blocks };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/case%zu.gguf", tmpdir, i);
        const long base = cases[i].key == 2 ? (long)emb->ne[1] : (long)n_layer;
        rewrite(src, path, cases[i].ch, keys[cases[i].key], cases[i].fv, (uint32_t)(base + cases[i].uv_delta));
        expect_load(cases[i].what, path, cases[i].rc, cases[i].needle);
        if (i == 0)
            test_overlap(path, src);
        unlink(path);
    }
    gguf_close(src);
    rmdir(tmpdir);
    return tu_finish("test_model_validate");
}
