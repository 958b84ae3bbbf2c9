/* test_gpuidx — PowerInfer's *.generated.gpuidx files and the VRAM split solver:
 *  - write → read gives back the same split; the file is laid out exactly as PowerInfer writes it
 *    (raw "PWRI" + u32 3, exactly the three keys in order with their types, 2 × n_layer I32 1-D
 *    tensors gpu_idx/gpu_bucket in layer order, buckets ascending; an empty layer's empty
 *    bucket, as PowerInfer writes it);
 *  - mismatches and malformed files are rejected with -PI_E_RANGE (block count, n_ff) or
 *    -PI_E_FORMAT (magic, architecture, missing key, tensor order/type, values, bucket);
 *  - the solver: fixed bytes are the VRAM plan's (test_vram_plan checks them by hand); budget 0 / exactly the fixed bytes → no
 *    neuron; a huge budget → all; in between the hottest neurons across layers (by act_freq, or by
 *    index without it), exactly as many as fit;
 *  - gpuidx_load_or_make: generates, then reuses for the same budget, regenerates for another budget,
 *    with reset, for a corrupt or foreign file; falls back to another directory when the model's
 *    directory is read-only. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "gpuidx.h"
#include "model.h"
#include "pi_err.h"
#include "pwri_testmodel.h"
#include "quant.h"
#include "split.h"
#include "testutil.h"

#define L 3
#define F 96
#define N_CTX 32

static struct pwri_cfg model_cfg(bool act_freq)
{
    return (struct pwri_cfg){ .arch = "llama", .pwri = true, .n_embd = 64, .n_layer = L, .n_ff = F, .n_head = 4,
                              .n_head_kv = 2, .head_dim = 16, .ffn_type = PI_TYPE_F16, .down_t = true,
                              .pred = PRED_RANDOM, .act_freq = act_freq };
}

static struct pi_model *make_model(const char *path, bool act_freq, struct pwri_weights *w, bool boost_last)
{
    struct pwri_cfg c = model_cfg(act_freq);
    pwri_make(&c, w, 7);
    if (boost_last && act_freq)
        for (int i = 0; i < F; i++)
            w->act_freq[L - 1][i] += 1.0f; /* the last layer is the hottest */
    pwri_write(path, &c, w);
    struct pi_model *m = NULL;
    int rc = model_load(&m, path);
    REQUIRE(rc == 0, "load %s: %s", path, pi_errmsg());
    return m;
}

/* ---- file layout ---- */

static void test_roundtrip(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/a.gpuidx", dir);
    uint8_t idx[L * F], back[L * F];
    for (int i = 0; i < L * F; i++)
        idx[i] = i < F ? 0 : i >= 2 * F ? 1 : (uint8_t)((i * 7919) % 3 == 0); /* empty, mixed, full */
    const uint64_t cap = 8ull << 30;
    CHECK_OK(gpuidx_write(path, L, F, idx, cap));
    uint64_t cap_back = 0;
    memset(back, 7, sizeof back);
    CHECK_OK(gpuidx_read(path, L, F, back, &cap_back));
    CHECK(memcmp(idx, back, sizeof idx) == 0 && cap_back == cap, "read back differs");

    /* raw header: what PowerInfer's post-processing writes */
    FILE *fp = fopen(path, "rb");
    unsigned char hdr[8] = { 0 };
    REQUIRE(fp && fread(hdr, 1, 8, fp) == 8, "read header");
    fclose(fp);
    CHECK(!memcmp(hdr, "PWRI", 4) && hdr[4] == 3 && !hdr[5] && !hdr[6] && !hdr[7], "header must be PWRI, u32 3");

    struct gguf_file *f = NULL;
    REQUIRE(gguf_open(&f, path) == 0, "gguf_open: %s", pi_errmsg());
    CHECK(gguf_is_powerinfer(f) && gguf_version(f) == 3, "magic/version");
    CHECK(gguf_n_kv(f) == 3, "exactly 3 keys, got %zu", gguf_n_kv(f));
    const char *keys[] = { "general.architecture", "generic.gpu_index.block_count", "split.vram_capacity" };
    const enum gguf_type ktypes[] = { GGUF_TYPE_STRING, GGUF_TYPE_UINT32, GGUF_TYPE_UINT64 };
    for (size_t i = 0; i < 3 && i < gguf_n_kv(f); i++)
        CHECK(!strcmp(gguf_kv_key(f, i), keys[i]) && gguf_kv_type(f, i) == ktypes[i], "key %zu: '%s' type %d", i,
              gguf_kv_key(f, i), gguf_kv_type(f, i));
    const char *arch = NULL;
    uint32_t blocks = 0;
    uint64_t vc = 0;
    CHECK(gguf_get_str(f, "general.architecture", &arch) == 0 && !strcmp(arch, "generic.gpu_index"), "arch");
    CHECK(gguf_get_u32(f, keys[1], &blocks) == 0 && blocks == L, "block_count");
    CHECK(gguf_get_u64(f, keys[2], &vc) == 0 && vc == cap, "vram_capacity");
    CHECK(gguf_n_tensors(f) == 2 * L, "tensors %zu", gguf_n_tensors(f));
    for (int il = 0; il < L && gguf_n_tensors(f) == 2 * L; il++) {
        char want[64];
        const struct gguf_tensor *ti = gguf_tensor(f, 2 * (size_t)il), *tb = gguf_tensor(f, 2 * (size_t)il + 1);
        snprintf(want, sizeof want, "blk.%d.gpu_idx", il);
        CHECK(!strcmp(ti->name, want) && ti->type == PI_TYPE_I32 && ti->n_dims == 1 && ti->ne[0] == F,
              "tensor %d: %s type %u dims %u ne0 %lld", 2 * il, ti->name, ti->type, ti->n_dims, (long long)ti->ne[0]);
        snprintf(want, sizeof want, "blk.%d.gpu_bucket", il);
        int64_t ones = 0;
        for (int i = 0; i < F; i++) {
            int32_t v;
            memcpy(&v, (const char *)ti->data + 4 * i, 4);
            CHECK(v == idx[il * F + i], "gpu_idx value");
            ones += v;
        }
        CHECK(!strcmp(tb->name, want) && tb->type == PI_TYPE_I32 && tb->n_dims == 1 &&
                  tb->ne[0] == ones,
              "tensor %d: %s ne0 %lld (ones %lld)", 2 * il + 1, tb->name, (long long)tb->ne[0], (long long)ones);
        int32_t prev = -1;
        for (int64_t k = 0; ones && k < tb->ne[0]; k++) {
            int32_t v;
            memcpy(&v, (const char *)tb->data + 4 * k, 4);
            CHECK(v > prev && idx[il * F + v] == 1, "bucket ascending GPU ids");
            prev = v;
        }
    }
    gguf_close(f);

    /* a file for another model */
    int rc = gpuidx_read(path, L + 1, F, back, NULL);
    CHECK(rc == -PI_E_RANGE && strstr(pi_errmsg(), "3 layers but the model has 4"), "block count: %d '%s'", rc,
          pi_errmsg());
    rc = gpuidx_read(path, L, F + 32, back, NULL);
    CHECK(rc == -PI_E_RANGE && strstr(pi_errmsg(), "96 neurons but the model's layers have 128"), "n_ff: %d '%s'",
          rc, pi_errmsg());
    unlink(path);
}

/* ---- malformed files, written with the GGUF writer directly ---- */

enum craft {
    CRAFT_OK,
    CRAFT_GGUF_MAGIC,
    CRAFT_ARCH,
    CRAFT_NO_CAPACITY,
    CRAFT_VALUE_2,
    CRAFT_BUCKET_ORDER,
    CRAFT_BUCKET_COUNT,
    CRAFT_BUCKET_NOT_GPU,
    CRAFT_TENSOR_ORDER,
    CRAFT_F32,
    CRAFT_2D,
    CRAFT_EMPTY_BUCKET_2,
    CRAFT_COUNT
};

/* layer il: neurons 0..3 on the GPU (bucket {0,1,2,3}); one mutation per craft */
static void craft(const char *path, enum craft k)
{
    struct gguf_writer *w = NULL;
    REQUIRE(gguf_writer_new(&w, k == CRAFT_GGUF_MAGIC ? GGUF_MAGIC_GGUF : GGUF_MAGIC_PWRI) == 0, "writer");
    gguf_writer_set_str(w, "general.architecture", k == CRAFT_ARCH ? "llama" : "generic.gpu_index");
    gguf_writer_set_u32(w, "generic.gpu_index.block_count", L);
    if (k != CRAFT_NO_CAPACITY)
        gguf_writer_set_u64(w, "split.vram_capacity", 1000);
    static int32_t idx[L][F], bucket[L][4];
    static float fidx[F];
    memset(idx, 0, sizeof idx);
    for (int il = 0; il < L; il++)
        for (int i = 0; i < 4; i++) {
            idx[il][i] = 1;
            bucket[il][i] = i;
        }
    if (k == CRAFT_VALUE_2)
        idx[1][50] = 2;
    if (k == CRAFT_BUCKET_ORDER) {
        bucket[2][1] = 2;
        bucket[2][2] = 1;
    }
    if (k == CRAFT_BUCKET_NOT_GPU)
        bucket[0][3] = 40;
    if (k == CRAFT_EMPTY_BUCKET_2)
        memset(idx[1], 0, sizeof idx[1]); /* no GPU neuron but a 4-element bucket */
    for (int il = 0; il < L; il++) {
        char n1[64], n2[64];
        snprintf(n1, sizeof n1, "blk.%d.gpu_idx", il);
        snprintf(n2, sizeof n2, "blk.%d.gpu_bucket", il);
        const int64_t ne_idx[2] = { k == CRAFT_2D && il == 0 ? F / 2 : F, 2 };
        const int64_t ne_b = k == CRAFT_BUCKET_COUNT && il == 1 ? 3 : 4;
        const bool swap = k == CRAFT_TENSOR_ORDER && il == 2;
        if (swap)
            gguf_writer_add_tensor(w, n2, PI_TYPE_I32, 1, &ne_b, bucket[il]);
        if (k == CRAFT_F32 && il == 0)
            gguf_writer_add_tensor(w, n1, PI_TYPE_F32, 1, ne_idx, fidx);
        else
            gguf_writer_add_tensor(w, n1, PI_TYPE_I32, k == CRAFT_2D && il == 0 ? 2 : 1, ne_idx, idx[il]);
        if (!swap)
            gguf_writer_add_tensor(w, n2, PI_TYPE_I32, 1, &ne_b, bucket[il]);
    }
    REQUIRE(gguf_writer_write_file(w, path) == 0, "write %s: %s", path, pi_errmsg());
    gguf_writer_free(w);
}

static void test_malformed(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/bad.gpuidx", dir);
    const char *needles[CRAFT_COUNT] = {
        [CRAFT_GGUF_MAGIC] = "expected PWRI version 3",
        [CRAFT_ARCH] = "general.architecture 'llama'",
        [CRAFT_NO_CAPACITY] = "lacks",
        [CRAFT_VALUE_2] = "blk.1.gpu_idx[50] = 2",
        [CRAFT_BUCKET_ORDER] = "blk.2.gpu_bucket[2] = 1 is not an ascending",
        [CRAFT_BUCKET_COUNT] = "'blk.1.gpu_bucket' lists 3 neurons but blk.1.gpu_idx has 4 ones",
        [CRAFT_BUCKET_NOT_GPU] = "blk.0.gpu_bucket[3] = 40",
        [CRAFT_TENSOR_ORDER] = "tensor #4 is 'blk.2.gpu_bucket', expected 'blk.2.gpu_idx'",
        [CRAFT_F32] = "'blk.0.gpu_idx' has type 0, expected i32",
        [CRAFT_2D] = "expected one dimension",
        [CRAFT_EMPTY_BUCKET_2] = "layer 1 has no GPU neuron but its bucket has 4",
    };
    uint8_t back[L * F];
    for (int k = 0; k < CRAFT_COUNT; k++) {
        craft(path, (enum craft)k);
        uint64_t cap = 0;
        int rc = gpuidx_read(path, L, F, back, &cap);
        if (k == CRAFT_OK) {
            CHECK(rc == 0 && cap == 1000 && back[F + 3] == 1 && back[F + 4] == 0, "crafted good file: %d %s", rc,
                  pi_errmsg());
            continue;
        }
        CHECK(rc == -PI_E_FORMAT && strstr(pi_errmsg(), needles[k]), "craft %d gave %d '%s'", k, rc, pi_errmsg());
    }
    unlink(path);
}

/* ---- solver ---- */

static void test_solver(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/solve.gguf", dir);
    struct pwri_weights w;
    struct pi_model *m = make_model(path, true, &w, true);
    const struct pwri_cfg c = model_cfg(true);
    /* the plan's fixed bytes (checked by hand in test_vram_plan) and a neuron's cost by hand: f16
     * gate, up and down_t rows and its int32 id */
    const uint64_t E = 64, f16 = 2;
    const struct vram_params vp = { .n_ctx = N_CTX, .n_seq = 1, .n_batch = 8 };
    const uint64_t fixed = split_fixed_bytes(m, &vp), cost = 3 * E * f16 + 4;
    struct split_report r;
    uint8_t idx[L * F];
    CHECK_OK(split_solve(m, &vp, 0, idx, &r));
    CHECK(r.fixed_bytes == fixed, "fixed bytes %llu, split_fixed_bytes %llu", (unsigned long long)r.fixed_bytes,
          (unsigned long long)fixed);
    CHECK(split_neuron_cost(m, 0) == cost, "neuron cost %llu, by hand %llu",
          (unsigned long long)split_neuron_cost(m, 0), (unsigned long long)cost);
    int64_t on = 0;
    for (int i = 0; i < L * F; i++)
        on += idx[i];
    CHECK(on == 0 && r.neurons == 0 && !r.fixed_fits && r.n_gpu_layers == 0, "budget 0: %lld neurons", (long long)on);
    split_report_fini(&r);

    CHECK_OK(split_solve(m, &vp, fixed, idx, &r));
    CHECK(r.neurons == 0 && r.fixed_fits && r.plan.total <= fixed, "budget = fixed: %lld neurons", (long long)r.neurons);
    /* per layer: 4 arrays' alignment and the cold table (a bit per neuron, 64-bit words, aligned to 256) */
    const uint64_t tab = ((uint64_t)(F + 63) / 64 * 8 + 255) / 256 * 256;
    CHECK(fixed - r.plan.fixed == (uint64_t)L * (4 * 255 + tab), "fixed bytes %llu = plan %llu + the reserve of 4 "
          "arrays' alignment and the cold table per layer", (unsigned long long)fixed, (unsigned long long)r.plan.fixed);
    split_report_fini(&r);

    CHECK_OK(split_solve(m, &vp, UINT64_MAX / 2, idx, &r));
    on = 0;
    for (int i = 0; i < L * F; i++)
        on += idx[i];
    CHECK(on == L * F && r.neurons == L * F && r.neuron_bytes == (uint64_t)L * F * cost && r.plan.hot == 0 &&
              r.covered == 1.0,
          "huge budget: %lld", (long long)on);
    for (int il = 0; il < L; il++)
        CHECK(r.layer_neurons[il] == F, "layer %d: %lld", il, (long long)r.layer_neurons[il]);
    split_report_fini(&r);

    /* k neurons fit (plus a remainder smaller than one): the hottest across layers */
    const int ks[] = { 50, F + 10 };
    for (int ki = 0; ki < 2; ki++) {
        const int k = ks[ki];
        CHECK_OK(split_solve(m, &vp, fixed + (uint64_t)k * cost + cost - 1, idx, &r));
        CHECK(r.neurons == k && r.by_freq && r.neuron_bytes == (uint64_t)k * cost, "k=%d: %lld neurons", k,
              (long long)r.neurons);
        CHECK(r.plan.total <= fixed + (uint64_t)k * cost + cost - 1 && r.plan.neurons == k && r.covered > 0 &&
                  r.covered < 1,
              "k=%d: plan %llu within the budget, coverage %g", k, (unsigned long long)r.plan.total, r.covered);
        float min_in = 1e9f, max_out = -1e9f;
        for (int il = 0; il < L; il++)
            for (int i = 0; i < F; i++) {
                const float fq = w.act_freq[il][i];
                if (idx[il * F + i])
                    min_in = fq < min_in ? fq : min_in;
                else
                    max_out = fq > max_out ? fq : max_out;
            }
        CHECK(min_in >= max_out, "k=%d: a colder neuron (%g) was placed before a hotter one (%g)", k, min_in,
              max_out);
        CHECK(r.layer_neurons[L - 1] == (k < F ? k : F), "k=%d: the hottest layer gets %lld", k,
              (long long)r.layer_neurons[L - 1]);
        split_report_fini(&r);
    }
    model_free(m);
    pwri_free((struct pwri_cfg *)&c, &w);

    /* without act_freq: by neuron index, the first neurons of every layer */
    m = make_model(path, false, &w, false);
    const struct pwri_cfg c2 = model_cfg(false);
    CHECK_OK(split_solve(m, &vp, fixed + 5 * cost, idx, &r));
    CHECK(!r.by_freq && r.neurons == 5 && idx[0] && idx[1] && idx[F] && idx[F + 1] && idx[2 * F] && !idx[2 * F + 1],
          "by index: %lld neurons", (long long)r.neurons);
    split_report_fini(&r);
    const struct vram_params vp0 = { .n_seq = 0 };
    CHECK_OK(split_solve(m, &vp0, 0, idx, NULL)); /* n_ctx 0: the training context; no report */
    model_free(m);
    pwri_free((struct pwri_cfg *)&c2, &w);
    unlink(path);
}

/* ---- load or make ---- */

static void test_load_or_make(const char *dir)
{
    char mdir[512], fdir[512], path[600], idxp[700], out[1024];
    snprintf(mdir, sizeof mdir, "%s/models", dir);
    snprintf(fdir, sizeof fdir, "%s/cache", dir);
    REQUIRE(mkdir(mdir, 0755) == 0 && mkdir(fdir, 0755) == 0, "mkdir");
    snprintf(path, sizeof path, "%s/m.gguf", mdir);
    snprintf(idxp, sizeof idxp, "%s/m.gguf.generated.gpuidx", mdir);
    struct pwri_weights w;
    const struct pwri_cfg c = model_cfg(true);
    struct pi_model *m = make_model(path, true, &w, false);
    uint8_t idx[L * F], want[L * F];
    const struct vram_params vp = { .n_ctx = N_CTX, .n_seq = 1, .n_batch = 8 };
    const uint64_t budget = split_fixed_bytes(m, &vp) + 40 * split_neuron_cost(m, 0);
    bool gen = false;
    CHECK_OK(gpuidx_load_or_make(path, NULL, m, &vp, budget, false, idx, out, sizeof out, &gen));
    CHECK(gen && !strcmp(out, idxp) && access(idxp, F_OK) == 0, "first call generates %s (got %s)", idxp, out);
    CHECK_OK(split_solve(m, &vp, budget, want, NULL));
    CHECK(memcmp(idx, want, sizeof idx) == 0, "the generated split is the solver's");
    CHECK_OK(gpuidx_load_or_make(path, NULL, m, &vp, budget, false, idx, out, sizeof out, &gen));
    CHECK(!gen && memcmp(idx, want, sizeof idx) == 0, "same budget: reused");
    CHECK_OK(gpuidx_load_or_make(path, NULL, m, &vp, budget, true, idx, out, sizeof out, &gen));
    CHECK(gen, "reset: regenerated");
    CHECK_OK(gpuidx_load_or_make(path, NULL, m, &vp, budget + split_neuron_cost(m, 0), false, idx, out,
                                 sizeof out, &gen));
    uint64_t cap = 0;
    CHECK(gen && gpuidx_read(idxp, L, F, want, &cap) == 0 && cap == budget + split_neuron_cost(m, 0),
          "another budget: regenerated with the new capacity");
    CHECK_OK(gpuidx_load_matching(idxp, m, cap, idx));
    int rc0 = gpuidx_load_matching(idxp, m, budget, idx);
    CHECK(rc0 == -PI_E_RANGE && strstr(pi_errmsg(), "was made for a budget of"), "budget mismatch: %d '%s'", rc0,
          pi_errmsg());
    /* a corrupt file and one for another model are replaced */
    FILE *fp = fopen(idxp, "wb");
    fputs("garbage", fp);
    fclose(fp);
    CHECK_OK(gpuidx_load_or_make(path, NULL, m, &vp, budget, false, idx, out, sizeof out, &gen));
    CHECK(gen, "corrupt file: regenerated");
    uint8_t other[(L + 1) * F];
    memset(other, 0, sizeof other);
    CHECK_OK(gpuidx_write(idxp, L + 1, F, other, budget));
    CHECK_OK(gpuidx_load_or_make(path, NULL, m, &vp, budget, false, idx, out, sizeof out, &gen));
    CHECK(gen && gpuidx_read(idxp, L, F, want, NULL) == 0, "foreign file: regenerated");

    /* a model directory that cannot take the file (read-only; as root, where permissions do not
     * bind, a directory in the way of the writer's PATH.tmp): the index goes to the fallback dir */
    unlink(idxp);
    char blocker[800];
    snprintf(blocker, sizeof blocker, "%s.tmp", idxp);
    const bool root = geteuid() == 0;
    if (root)
        REQUIRE(mkdir(blocker, 0755) == 0, "mkdir %s", blocker);
    else
        chmod(mdir, 0555);
    int rc = gpuidx_load_or_make(path, NULL, m, &vp, budget, false, idx, out, sizeof out, &gen);
    CHECK(rc == (root ? -EISDIR : -EACCES), "unwritable dir without fallback: %d %s", rc, pi_errmsg());
    CHECK_OK(gpuidx_load_or_make(path, fdir, m, &vp, budget, false, idx, out, sizeof out, &gen));
    char alt[1024];
    snprintf(alt, sizeof alt, "%s/m.gguf.generated.gpuidx", fdir);
    CHECK(gen && !strcmp(out, alt) && access(alt, F_OK) == 0, "fallback: %s", out);
    CHECK_OK(gpuidx_load_or_make(path, fdir, m, &vp, budget, false, idx, out, sizeof out, &gen));
    CHECK(!gen && !strcmp(out, alt), "fallback reused");
    if (root)
        rmdir(blocker);
    else
        chmod(mdir, 0755);
    unlink(alt);
    unlink(idxp);
    model_free(m);
    pwri_free((struct pwri_cfg *)&c, &w);
    unlink(path);
    rmdir(mdir);
    rmdir(fdir);
}

int main(void)
{
    char dir[] = "/tmp/pinfer-gpuidxXXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    test_roundtrip(dir);
    test_malformed(dir);
    test_solver(dir);
    test_load_or_make(dir);
    rmdir(dir);
    return tu_finish("gpuidx");
}
