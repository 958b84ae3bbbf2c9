/* test_quantize — pictl quantize (tools/quantize):
 *  - the per-tensor plan on the embedded tiny model for every mixture equals llama-quantize's
 *    (tests/fixtures/quant/llama_quantize_tiny.txt, when present: made once with llama.cpp's
 *    llama-quantize --dry-run) and, always, the rules worked out by hand for q4_k_m, q4_k_s, q6_k,
 *    q8_0, q4_0, q3_k_m, q2_k, --pure, --output-tensor-type, --token-embedding-type,
 *    --leave-output-tensor;
 *  - the fallback for row lengths off the 256 block (Q4_K -> Q5_0, Q6_K -> Q8_0, ... then F16),
 *    a tied embedding treated as the output, re-quantizing refused without --allow-requantize;
 *  - PowerInfer files: PWRI magic and every key kept, predictors Q5_0 (Q4_0 in a Q4_0 file) or
 *    their own type with --keep-predictors;
 *  - the written file: every tensor's bytes equal our quantizer on the f16 -> f32 input rows
 *    (byte-exact with llama.cpp by test_quant_fixture), general.file_type the mixture's, 1-D
 *    tensors unchanged, the file loads and its size is what --dry-run announced. */
#include "gguf.h"
#include "pi_err.h"
#include "pwri_testmodel.h"
#include "quant.h"
#include "quantize.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/pinfer_quantize_XXXXXX";

struct planned {
    size_t n;
    struct qz_tensor *t;
    uint32_t *type;
    bool *fell;
};

static int plan_file(const char *path, const struct qz_params *p, struct planned *out)
{
    struct gguf_file *f;
    int rc = gguf_open(&f, path);
    if (rc)
        return rc;
    struct qz_model m = { .powerinfer = gguf_is_powerinfer(f) };
    uint32_t v;
    gguf_get_str(f, "general.architecture", &m.arch);
    char key[128];
    snprintf(key, sizeof key, "%s.block_count", m.arch);
    gguf_get_u32(f, key, &v);
    m.n_layer = (int32_t)v;
    snprintf(key, sizeof key, "%s.attention.head_count", m.arch);
    gguf_get_u32(f, key, &v);
    m.n_head = (int32_t)v;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m.arch);
    m.n_head_kv = gguf_get_u32(f, key, &v) == 0 ? (int32_t)v : m.n_head;
    out->n = gguf_n_tensors(f);
    out->t = calloc(out->n, sizeof *out->t);
    out->type = calloc(out->n, sizeof *out->type);
    out->fell = calloc(out->n, sizeof *out->fell);
    for (size_t i = 0; i < out->n; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        out->t[i] = (struct qz_tensor){ strdup(t->name), t->n_dims, { t->ne[0], t->ne[1], t->ne[2], t->ne[3] }, t->type };
    }
    m.arch = strdup(m.arch);
    gguf_close(f);
    rc = qz_plan(p, &m, out->t, out->n, out->type, out->fell);
    free((char *)m.arch);
    return rc;
}

static void planned_free(struct planned *p)
{
    for (size_t i = 0; i < p->n; i++)
        free((char *)p->t[i].name);
    free(p->t), free(p->type), free(p->fell);
    memset(p, 0, sizeof *p);
}

static struct qz_params params(const char *mix)
{
    struct qz_params p = { .mix = qz_mixture_find(mix), .output_type = QZ_TYPE_AUTO, .token_embd_type = QZ_TYPE_AUTO };
    REQUIRE(p.mix != NULL, "mixture %s", mix);
    return p;
}

static int layer_of(const char *name)
{
    int l = -1;
    return sscanf(name, "blk.%d.", &l) == 1 ? l : -1;
}

/* the tiny model (6 layers, attn_v [256,128], rows of 256 or 1024): rules by hand */
static uint32_t expect_tiny(const char *mix, const struct qz_tensor *t, const struct qz_params *p)
{
    const uint32_t d = p->mix->type;
    if (t->n_dims < 2)
        return t->type;
    const bool is_out = !strcmp(t->name, "output.weight"), is_emb = !strcmp(t->name, "token_embd.weight");
    if (is_out && p->leave_output)
        return t->type;
    if (is_out && p->output_type != QZ_TYPE_AUTO)
        return p->output_type;
    if (is_emb && p->token_embd_type != QZ_TYPE_AUTO)
        return p->token_embd_type;
    if (d == PI_TYPE_F16 || d == PI_TYPE_F32 || d == PI_TYPE_BF16)
        return d;
    if (p->pure)
        return d;
    if (is_out)
        return d == PI_TYPE_Q8_0 ? PI_TYPE_Q8_0 : PI_TYPE_Q6_K;
    const int l = layer_of(t->name);
    /* use_more_bits(i, 6): 6/8 = 0, so layers 2 and 5 (i >= 7*6/8 = 5, (i - 0) % 3 == 2) */
    const bool more = l == 2 || l == 5;
    const bool attn_v = strstr(t->name, "attn_v.weight") != NULL, down = strstr(t->name, "ffn_down") != NULL;
    const bool attn_out = strstr(t->name, "attn_output.weight") != NULL;
    if (!strcmp(mix, "q4_k_m") && (attn_v || down) && more)
        return PI_TYPE_Q6_K;
    if (!strcmp(mix, "q4_k_s") && attn_v && l < 4)
        return PI_TYPE_Q5_K; /* the first four attn_v; ffn_down: l < 6/8 = 0, none */
    if (!strcmp(mix, "q3_k_m")) {
        if (attn_v)
            return l < 2 ? PI_TYPE_Q5_K : PI_TYPE_Q4_K;
        if (down)
            return PI_TYPE_Q4_K; /* l < 6/16 = 0 never: Q4_K (not falcon) */
        if (attn_out)
            return PI_TYPE_Q4_K;
    }
    if (!strcmp(mix, "q2_k")) {
        if (attn_v)
            return PI_TYPE_Q3_K; /* n_gqa = 4/2 = 2 < 4 */
        if (down || attn_out)
            return PI_TYPE_Q3_K;
    }
    return d;
}

static void test_plan_tiny(const char *model)
{
    const char *mixes[] = { "q4_k_m", "q4_k_s", "q3_k_m", "q2_k", "q6_k", "q8_0", "q4_0", "q5_1", "iq4_nl",
                            "f16", "bf16", "f32" };
    for (size_t k = 0; k < sizeof mixes / sizeof mixes[0]; k++) {
        for (int variant = 0; variant < 5; variant++) {
            struct qz_params p = params(mixes[k]);
            if (variant == 1)
                p.pure = true;
            if (variant == 2)
                p.output_type = PI_TYPE_Q8_0;
            if (variant == 3)
                p.token_embd_type = PI_TYPE_Q6_K;
            if (variant == 4)
                p.leave_output = true;
            struct planned pl;
            int rc = plan_file(model, &p, &pl);
            CHECK(rc == 0, "plan %s: %s", mixes[k], pi_errmsg());
            int bad = 0;
            for (size_t i = 0; rc == 0 && i < pl.n; i++) {
                uint32_t want = expect_tiny(mixes[k], &pl.t[i], &p);
                if (pl.type[i] != want && bad++ < 3)
                    fprintf(stderr, "  %s variant %d %s: %s, expected %s\n", mixes[k], variant, pl.t[i].name,
                            quant_traits(pl.type[i])->name, quant_traits(want)->name);
                CHECK(!pl.fell[i], "%s: no fallback on the tiny model", pl.t[i].name);
            }
            CHECK(bad == 0, "%s variant %d: %d tensors off the rules", mixes[k], variant, bad);
            planned_free(&pl);
        }
    }
    CHECK(qz_mixture_find("Q4_K_M") == qz_mixture_find("q4_k_m") && qz_mixture_find("q4_k") == qz_mixture_find("q4_k_m"),
          "names case-insensitive, q4_k = q4_k_m");
    CHECK(qz_mixture_find("q4_k_x") == NULL && qz_mixture_find("iq2_xxs") == NULL, "unknown mixtures");
}

/* tests/fixtures/quant/llama_quantize_tiny.txt: "MIXTURE TENSOR TYPE" lines from llama-quantize */
static void test_plan_vs_llama(const char *model, const char *src)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/quant/llama_quantize_tiny.txt", src);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "note: %s absent: plan not compared with llama-quantize\n", path);
        return;
    }
    char line[256], cur[32] = "";
    struct planned pl = { 0 };
    int lines = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        char mix[32], name[128], type[32];
        if (line[0] == '#' || sscanf(line, "%31s %127s %31s", mix, name, type) != 3)
            continue;
        if (strcmp(mix, cur) != 0) {
            planned_free(&pl);
            snprintf(cur, sizeof cur, "%s", mix);
            struct qz_params p = params(mix);
            REQUIRE(plan_file(model, &p, &pl) == 0, "plan %s", mix);
        }
        lines++;
        size_t i = 0;
        while (i < pl.n && strcmp(pl.t[i].name, name) != 0)
            i++;
        REQUIRE(i < pl.n, "tensor %s in the model", name);
        if (strcasecmp(quant_traits(pl.type[i])->name, type) != 0 && bad++ < 10)
            fprintf(stderr, "  %s %s: ours %s, llama-quantize %s\n", mix, name, quant_traits(pl.type[i])->name, type);
    }
    planned_free(&pl);
    fclose(f);
    CHECK(lines > 0 && bad == 0, "plan vs llama-quantize: %d of %d tensors differ", bad, lines);
}

/* synthetic tensor lists: fallback, tied embeddings, requantize, PowerInfer predictors */
static void test_plan_rules(void)
{
    struct qz_model m = { .arch = "llama", .n_layer = 1, .n_head = 8, .n_head_kv = 8 };
    struct qz_tensor t[] = {
        { "token_embd.weight", 2, { 288, 10, 1, 1 }, PI_TYPE_F16 },      /* tied (no output.weight) */
        { "blk.0.attn_q.weight", 2, { 288, 288, 1, 1 }, PI_TYPE_F16 },   /* off the 256 block */
        { "blk.0.ffn_down.weight", 2, { 40, 288, 1, 1 }, PI_TYPE_F16 },  /* off 32 too: F16 */
        { "blk.0.ffn_up.weight", 2, { 512, 40, 1, 1 }, PI_TYPE_F32 },
        { "blk.0.attn_norm.weight", 1, { 288, 1, 1, 1 }, PI_TYPE_F32 },
    };
    const size_t n = sizeof t / sizeof t[0];
    uint32_t ty[5];
    bool fell[5];
    struct qz_params p = params("q4_k_m");
    CHECK_OK(qz_plan(&p, &m, t, n, ty, fell));
    CHECK(ty[0] == PI_TYPE_Q8_0, "tied embedding with rows off the block: Q8_0 (got %s)", quant_traits(ty[0])->name);
    CHECK(ty[1] == PI_TYPE_Q5_0 && fell[1], "q4_K fallback Q5_0 (got %s)", quant_traits(ty[1])->name);
    CHECK(ty[2] == PI_TYPE_F16 && fell[2], "no 32-block fits 40: F16 (got %s)", quant_traits(ty[2])->name);
    CHECK(ty[3] == PI_TYPE_Q4_K && !fell[3], "512 fits (got %s)", quant_traits(ty[3])->name);
    CHECK(ty[4] == PI_TYPE_F32, "1-D stays f32");
    p = params("q6_k");
    CHECK_OK(qz_plan(&p, &m, t, n, ty, fell));
    CHECK(ty[1] == PI_TYPE_Q8_0 && fell[1], "q6_K fallback Q8_0");
    p = params("q5_k_s");
    CHECK_OK(qz_plan(&p, &m, t, n, ty, fell));
    CHECK(ty[1] == PI_TYPE_Q5_1 && fell[1], "q5_K fallback Q5_1");
    p = params("q3_k_s");
    CHECK_OK(qz_plan(&p, &m, t, n, ty, fell));
    CHECK(ty[1] == PI_TYPE_Q4_0 && fell[1], "q3_K fallback Q4_0");
    p = params("iq4_xs");
    CHECK_OK(qz_plan(&p, &m, t, n, ty, fell));
    CHECK(ty[1] == PI_TYPE_IQ4_NL && fell[1], "iq4_xs fallback IQ4_NL");
    p = params("q4_0");
    t[2].ne[0] = 48;
    CHECK(qz_plan(&p, &m, t, n, ty, fell) == -PI_E_UNSUPPORTED, "q4_0 has no fallback for 48 columns");
    t[2].ne[0] = 40;

    /* re-quantizing */
    struct qz_tensor q[] = { { "blk.0.attn_q.weight", 2, { 256, 4, 1, 1 }, PI_TYPE_Q8_0 } };
    p = params("q4_k_m");
    CHECK(qz_plan(&p, &m, q, 1, ty, fell) == -PI_E_UNSUPPORTED, "requantize refused");
    CHECK(strstr(pi_errmsg(), "--allow-requantize") != NULL, "message names the flag: %s", pi_errmsg());
    p.allow_requantize = true;
    CHECK(qz_plan(&p, &m, q, 1, ty, fell) == 0 && ty[0] == PI_TYPE_Q4_K, "requantize allowed");
    p = params("q8_0");
    CHECK(qz_plan(&p, &m, q, 1, ty, fell) == 0 && ty[0] == PI_TYPE_Q8_0, "same type: no requantization");

    /* PowerInfer predictors */
    struct qz_tensor pw[] = { { "blk.0.fc1.weight", 2, { 256, 64, 1, 1 }, PI_TYPE_F16 },
                              { "blk.0.fc2.weight", 2, { 64, 512, 1, 1 }, PI_TYPE_F16 },
                              { "blk.0.ffn_down_t.weight", 2, { 256, 512, 1, 1 }, PI_TYPE_F16 } };
    struct qz_model mp = m;
    mp.powerinfer = true;
    mp.n_layer = 8;
    p = params("q4_k_m");
    CHECK_OK(qz_plan(&p, &mp, pw, 3, ty, fell));
    CHECK(ty[0] == PI_TYPE_Q5_0 && ty[1] == PI_TYPE_Q5_0, "predictors Q5_0 (%s %s)", quant_traits(ty[0])->name,
          quant_traits(ty[1])->name);
    CHECK(ty[2] == PI_TYPE_Q6_K, "ffn_down_t is an ffn_down (layer 0 of 8: more bits)");
    p = params("q4_0");
    CHECK_OK(qz_plan(&p, &mp, pw, 3, ty, fell));
    CHECK(ty[0] == PI_TYPE_Q4_0 && ty[1] == PI_TYPE_Q4_0, "predictors Q4_0 in a Q4_0 file");
    p = params("q4_k_m");
    p.keep_predictors = true;
    CHECK_OK(qz_plan(&p, &mp, pw, 3, ty, fell));
    CHECK(ty[0] == PI_TYPE_F16 && ty[1] == PI_TYPE_F16, "--keep-predictors");
    p = params("f16");
    CHECK_OK(qz_plan(&p, &mp, pw, 3, ty, fell));
    CHECK(ty[0] == PI_TYPE_F16, "float mixtures leave predictors float");
}

static size_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* the written file: bytes = our quantizer on the input rows; keys; magic; loads */
static void check_written(const char *in_path, const char *out_path, const char *mix, bool expect_pwri)
{
    struct gguf_file *in, *out;
    REQUIRE(gguf_open(&in, in_path) == 0, "open %s", in_path);
    int rc = gguf_open(&out, out_path);
    CHECK(rc == 0, "%s: written file opens: %s", mix, pi_errmsg());
    if (rc) {
        gguf_close(in);
        return;
    }
    CHECK(gguf_is_powerinfer(out) == expect_pwri, "%s: magic kept", mix);
    CHECK(gguf_n_kv(out) >= gguf_n_kv(in), "%s: keys kept (%zu vs %zu)", mix, gguf_n_kv(out), gguf_n_kv(in));
    for (size_t i = 0; i < gguf_n_kv(in); i++)
        CHECK(gguf_find_key(out, gguf_kv_key(in, i)) >= 0, "%s: key %s kept", mix, gguf_kv_key(in, i));
    uint32_t ft = 0;
    CHECK(gguf_get_u32(out, "general.file_type", &ft) == 0 && ft == qz_mixture_find(mix)->ftype, "%s file_type %u",
          mix, ft);
    REQUIRE(gguf_n_tensors(in) == gguf_n_tensors(out), "tensor count");
    int bad = 0;
    float *row = malloc(65536 * sizeof *row);
    uint8_t *q = malloc(65536 * 4);
    REQUIRE(row && q, "alloc");
    for (size_t i = 0; i < gguf_n_tensors(in); i++) {
        const struct gguf_tensor *a = gguf_tensor(in, i), *b = gguf_tensor(out, i);
        CHECK(!strcmp(a->name, b->name) && a->n_dims == b->n_dims && !memcmp(a->ne, b->ne, sizeof a->ne),
              "%s: tensor %zu same name and shape", mix, i);
        if (a->type == b->type) {
            CHECK(a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0, "%s: %s copied", mix, a->name);
            continue;
        }
        const int64_t nr = a->ne[1] * a->ne[2] * a->ne[3];
        const size_t ra = quant_row_size(a->type, a->ne[0]), rb = quant_row_size(b->type, b->ne[0]);
        for (int64_t r = 0; r < nr; r++) {
            quant_traits_ref(a->type)->to_float((const uint8_t *)a->data + r * ra, row, a->ne[0]);
            quant_traits_ref(b->type)->from_float(row, q, a->ne[0]);
            if (memcmp(q, (const uint8_t *)b->data + r * rb, rb) != 0) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s: %s row %lld differs from the reference quantizer\n", mix, a->name,
                            (long long)r);
                break;
            }
        }
    }
    CHECK(bad == 0, "%s: %d tensors not the reference quantizer's bytes", mix, bad);
    size_t sum = 0;
    for (size_t i = 0; i < gguf_n_tensors(out); i++)
        sum += gguf_tensor(out, i)->nbytes;
    const size_t fsz = file_size(out_path), slack = gguf_data_offset(out) + gguf_n_tensors(out) * gguf_alignment(out);
    CHECK(fsz >= sum && fsz <= sum + slack, "%s: file %zu bytes for %zu bytes of tensors", mix, fsz, sum);
    free(row), free(q);
    gguf_close(in);
    gguf_close(out);
}

static void test_run(const char *model)
{
    const char *mixes[] = { "q4_k_m", "q6_k", "q8_0", "iq4_xs", "q5_1" };
    for (size_t k = 0; k < sizeof mixes / sizeof mixes[0]; k++) {
        char out[sizeof tmpdir + 32], dry[sizeof tmpdir + 32];
        snprintf(out, sizeof out, "%s/%s.gguf", tmpdir, mixes[k]);
        snprintf(dry, sizeof dry, "%s/dry-%s.gguf", tmpdir, mixes[k]);
        struct qz_opts o = { .in = model, .out = out, .params = params(mixes[k]), .n_threads = 2 };
        CHECK_OK(qz_run(&o));
        check_written(model, out, mixes[k], false);
        /* --dry-run writes nothing; its size line is the written size's tensor bytes */
        char *buf = NULL;
        size_t len = 0;
        FILE *log = open_memstream(&buf, &len);
        struct qz_opts d = o;
        d.out = dry;
        d.dry_run = true;
        d.log = log;
        CHECK_OK(qz_run(&d));
        fclose(log);
        CHECK(access(dry, F_OK) != 0, "%s: --dry-run wrote no file", mixes[k]);
        CHECK(buf && strstr(buf, "dry run") && strstr(buf, "output.weight"), "%s: dry-run plan printed", mixes[k]);
        free(buf);
        unlink(out);
    }
    /* re-quantizing a quantized file is refused, and allowed with the flag */
    char q8[sizeof tmpdir + 32], q4[sizeof tmpdir + 32];
    snprintf(q8, sizeof q8, "%s/q8.gguf", tmpdir);
    snprintf(q4, sizeof q4, "%s/q4.gguf", tmpdir);
    struct qz_opts o = { .in = model, .out = q8, .params = params("q8_0"), .n_threads = 1 };
    CHECK_OK(qz_run(&o));
    o = (struct qz_opts){ .in = q8, .out = q4, .params = params("q4_k_m"), .n_threads = 2 };
    CHECK(qz_run(&o) == -PI_E_UNSUPPORTED && access(q4, F_OK) != 0, "requantize refused, nothing written");
    o.params.allow_requantize = true;
    CHECK_OK(qz_run(&o));
    check_written(q8, q4, "q4_k_m", false);
    unlink(q8), unlink(q4);
}

static void test_run_pwri(void)
{
    struct pwri_cfg c = { .arch = "llama", .pwri = true, .n_embd = 256, .n_layer = 2, .n_ff = 512, .n_head = 4,
                          .n_head_kv = 4, .head_dim = 64, .ffn_type = PI_TYPE_F16, .down_t = true,
                          .pred = PRED_RANDOM };
    struct pwri_weights w;
    char in[sizeof tmpdir + 32], out[sizeof tmpdir + 32];
    snprintf(in, sizeof in, "%s/in.pwri.gguf", tmpdir);
    snprintf(out, sizeof out, "%s/out.pwri.gguf", tmpdir);
    pwri_make(&c, &w, 3);
    pwri_write(in, &c, &w);
    pwri_free(&c, &w);
    struct qz_opts o = { .in = in, .out = out, .params = params("q4_k_m"), .n_threads = 2 };
    CHECK_OK(qz_run(&o));
    check_written(in, out, "q4_k_m", true);
    struct gguf_file *f;
    REQUIRE(gguf_open(&f, out) == 0, "open");
    const struct gguf_tensor *fc1 = gguf_find_tensor(f, "blk.0.fc1.weight"), *dt = gguf_find_tensor(f, "blk.1.ffn_down_t.weight");
    CHECK(fc1 && fc1->type == PI_TYPE_Q5_0, "PowerInfer predictor Q5_0");
    CHECK(dt && (dt->type == PI_TYPE_Q4_K || dt->type == PI_TYPE_Q6_K), "ffn_down_t quantized as K");
    gguf_close(f);
    unlink(in), unlink(out);
}

int main(void)
{
    REQUIRE(mkdtemp(tmpdir) != NULL, "mkdtemp");
    const char *src = getenv("PINFER_SOURCE");
    char model[4096];
    snprintf(model, sizeof model, "%s/models/tiny-relu-llama-f16.gguf", src ? src : ".");
    test_plan_rules();
    if (access(model, R_OK) == 0) {
        test_plan_tiny(model);
        test_plan_vs_llama(model, src ? src : ".");
        test_run(model);
    } else {
        fprintf(stderr, "note: %s absent: tiny-model plan and run skipped\n", model);
    }
    test_run_pwri();
    rmdir(tmpdir);
    return tu_finish("test_quantize");
}
