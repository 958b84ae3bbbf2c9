/* test_calibrate — `pictl calibrate` (tools/calibrate) on the tiny ReLU llama:
 *   - the GEMM backend against the scalar reference, the threshold choice on a known set;
 *   - calibration on the training part of the corpus (first 95 % of each file; excerpts in tests/fixtures/corpus): per-layer
 *     held-out recall >= 0.99 (--json-stats figures), and on the corpus' held-out part (last 5 %);
 *   - the PWRI file: gguf_open round trip (magic, keys, shapes), ffn_down_t the bit-exact transpose
 *     of ffn_down (f16), every other tensor unchanged; q8_0 ffn_down requantized after transposing;
 *   - bad input: missing data file, a SwiGLU model, --rank > n_embd, too little text, a PWRI input;
 *   - the sparse engine on the calibrated file: greedy decoding of the reference prompts against
 *     dense, held-out perplexity sparse vs dense (decode-shaped: one token per evaluation).
 *   - the CLI: usage errors, and two runs with one seed give byte-identical files.
 * usage: test_calibrate MODEL_F16.gguf MODEL_Q8_0.gguf [PICTL] */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cal_internal.h"
#include "calibrate.h"
#include "eval.h"
#include "gguf.h"
#include "model.h"
#include "pi_err.h"
#include "quant.h"
#include "testutil.h"
#include "tokenizer.h"

/* Calibration size for CI: small enough for ASan on 2 cores, large enough for a stable 0.99. */
#define T_TOKENS 4096
#define T_HELDOUT 2048
#define T_EVAL_TOKENS 1024
#define T_RANK 64
#define T_EPOCHS 4
#define T_TRAIN_FRAC 0.95
#define T_SLICES 4          /* slices taken from each file's training part */
#define T_SLICE_BYTES 20000
#define T_EVAL_BYTES 24000  /* from each file's held-out part */
#define T_RECALL 0.99
#define T_SPARSE_MATCH 0.95 /* greedy tokens equal to dense */
#define T_PPL_TOL 0.02      /* sparse perplexity within 2 % of dense */
#define T_PPL_CHUNK 128
#define T_PPL_CHUNKS 3

static char tmpdir[256];

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = '\0';
        *len = (size_t)n;
    }
    return b;
}

/* train.txt: T_SLICES slices spread over the first 95 % of each corpus file; heldout.txt: the start
 * of each file's last 5 % (tests/fixtures/corpus holds exactly those excerpts: make_fixtures.py). */
static void write_corpus(const char *fixtures, char *train, char *held, size_t cap)
{
    static const char *const files[] = { "tinyshakespeare", "fortunes" };
    snprintf(train, cap, "%s/train.txt", tmpdir);
    snprintf(held, cap, "%s/heldout.txt", tmpdir);
    FILE *ft = fopen(train, "wb"), *fh = fopen(held, "wb");
    REQUIRE(ft && fh, "cannot write into %s", tmpdir);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[512];
        size_t len = 0;
        snprintf(path, sizeof path, "%s/corpus/%s.train.txt", fixtures, files[i]);
        char *text = slurp(path, &len);
        REQUIRE(text && len == (size_t)T_SLICES * T_SLICE_BYTES, "cannot read %s (%zu bytes)", path, len);
        fwrite(text, 1, len, ft);
        free(text);
        snprintf(path, sizeof path, "%s/corpus/%s.heldout.txt", fixtures, files[i]);
        text = slurp(path, &len);
        REQUIRE(text, "cannot read %s", path);
        fwrite(text, 1, len < T_EVAL_BYTES ? len : T_EVAL_BYTES, fh);
        free(text);
    }
    fclose(ft);
    fclose(fh);
}

static void test_gemm(void)
{
    struct cal_gemm blas, ref;
    cal_gemm_blas(&blas, 2);
    cal_gemm_ref(&ref);
    const int M = 37, N = 29, K = 53;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
    uint64_t s = 1;
    for (int i = 0; i < M * K; i++) A[i] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 24) - 0.5f;
    for (int i = 0; i < K * N; i++) B[i] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 24) - 0.5f;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (int i = 0; i < M * N; i++) C1[i] = C2[i] = (float)i / (M * N);
            const int lda = ta ? M : K, ldb = tb ? K : N;
            blas.sgemm(blas.self, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, C1, N);
            ref.sgemm(ref.self, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, C2, N);
            float md = 0;
            for (int i = 0; i < M * N; i++) md = fmaxf(md, fabsf(C1[i] - C2[i]));
            CHECK(md < 1e-4f, "gemm %s vs reference (ta %d tb %d): max diff %g", blas.name, ta, tb, md);
        }
    free(A), free(B), free(C1), free(C2);
}

static int cmp_f(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* One layer, n_embd 1, one neuron: logit = 1 · relu(1 · h), so the threshold must be the
 * floor((1 - recall) · P)-th smallest h among the fired rows (with many ties). */
static void test_threshold(void)
{
    struct cal_rec r;
    const int32_t n = 5000;
    REQUIRE(cal_rec_init(&r, 1, 1, 1, 0, n) == 0, "rec init");
    float *pos = malloc(sizeof(float) * n);
    size_t P = 0;
    uint64_t s = 7;
    for (int32_t t = 0; t < n; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        r.h[0][t] = (float)((s >> 33) % 97) / 10.0f; /* ties on purpose */
        if ((s >> 20) % 3 == 0) {
            r.fired[0][t] = 1;
            pos[P++] = r.h[0][t];
        }
    }
    struct cal_pred p;
    REQUIRE(cal_pred_init(&p, 1, 1, 1) == 0, "pred init");
    p.w1[0] = p.w2[0] = 1.0f;
    struct cal_gemm g;
    cal_gemm_ref(&g);
    float thr, sd;
    CHECK_OK(cal_threshold(&g, &r, 0, 0, n, &p, 0.9, &thr, &sd));
    qsort(pos, P, sizeof *pos, cmp_f);
    CHECK(thr == pos[(size_t)floor(0.1 * (double)P)], "threshold %g, expected %g", thr, pos[(size_t)(0.1 * P)]);
    struct cal_stats st;
    CHECK_OK(cal_evaluate(&g, &r, 0, 0, n, &p, thr, &st));
    CHECK(cal_recall(&st) >= 0.9 && st.n == (uint64_t)n, "recall %.4f at the chosen threshold", cal_recall(&st));
    CHECK(sd > 0.0f, "logit std %g", sd);
    free(pos);
    cal_pred_fini(&p);
    cal_rec_fini(&r);
}

static json_t *run_calibration(const char *model, const char *train, const char *held, const char *out)
{
    char js[512], svg[512];
    snprintf(js, sizeof js, "%s/stats.json", tmpdir);
    snprintf(svg, sizeof svg, "%s/report.svg", tmpdir);
    const char *data[] = { train }, *eval[] = { held };
    struct cal_opts o;
    cal_opts_defaults(&o);
    o.model = model;
    o.data = data;
    o.n_data = 1;
    o.eval = eval;
    o.n_eval = 1;
    o.out = out;
    o.json_stats = js;
    o.report_svg = svg;
    o.tokens = T_TOKENS;
    o.heldout = T_HELDOUT;
    o.eval_tokens = T_EVAL_TOKENS;
    o.rank = T_RANK;
    o.epochs = T_EPOCHS;
    o.n_threads = 2;
    o.recall = (float)T_RECALL;
    int rc = cal_run(&o);
    REQUIRE(rc == 0, "cal_run: %s %s", pi_strerror(rc), pi_errmsg());
    size_t len = 0;
    char *s = slurp(svg, &len);
    CHECK(s && strstr(s, "<svg") && strstr(s, "</svg>") && strstr(s, "polyline") && strstr(s, "<rect"),
          "--report wrote no SVG with curves and bars");
    free(s);
    json_error_t err;
    json_t *root = json_load_file(js, 0, &err);
    REQUIRE(root, "--json-stats: %s", err.text);
    return root;
}

static void check_stats(json_t *root, const struct pi_model *m)
{
    json_t *layers = json_object_get(root, "layers");
    REQUIRE(json_is_array(layers) && (int)json_array_size(layers) == m->hp.n_layer, "layers array");
    CHECK(json_integer_value(json_object_get(root, "tokens_train")) == T_TOKENS, "tokens_train");
    CHECK(json_integer_value(json_object_get(root, "tokens_heldout")) == T_HELDOUT, "tokens_heldout");
    CHECK(json_is_true(json_object_get(root, "ffn_down_t_exact")), "f16 ffn_down_t must be an exact transpose");
    fprintf(stderr, "layer rank  recall  pred_active true_active  eval_recall eval_pred\n");
    for (int l = 0; l < m->hp.n_layer; l++) {
        json_t *x = json_array_get(layers, (size_t)l), *ev = json_object_get(x, "eval");
        const double rec = json_real_value(json_object_get(x, "recall"));
        const double pf = json_real_value(json_object_get(x, "pred_active"));
        const double tf = json_real_value(json_object_get(x, "true_active"));
        const double erec = json_real_value(json_object_get(ev, "recall"));
        const json_int_t rank = json_integer_value(json_object_get(x, "rank"));
        fprintf(stderr, "%5d %4d %7.4f %12.4f %11.4f %12.4f %9.4f\n", l, (int)rank, rec, pf, tf, erec,
                json_real_value(json_object_get(ev, "pred_active")));
        CHECK(rank == T_RANK, "layer %d: rank %d", l, (int)rank);
        CHECK(rec >= T_RECALL, "layer %d: held-out recall %.4f < %.2f", l, rec, T_RECALL);
        CHECK(erec >= T_RECALL, "layer %d: recall on the corpus' held-out text %.4f < %.2f", l, erec, T_RECALL);
        CHECK(tf > 0.0 && tf < 0.6 && pf >= tf * rec - 1e-9 && pf < 1.0, "layer %d: fractions %.4f / %.4f", l, pf, tf);
        CHECK(json_integer_value(json_object_get(x, "predictor_bytes")) ==
                  (json_int_t)(rank * (m->hp.n_embd + m->hp.n_ff) * 2),
              "layer %d: predictor bytes", l);
    }
}

static void check_pwri(const char *src_path, const char *out_path, int32_t rank)
{
    struct gguf_file *src = NULL, *out = NULL;
    REQUIRE(gguf_open(&src, src_path) == 0 && gguf_open(&out, out_path) == 0, "gguf_open: %s", pi_errmsg());
    CHECK(gguf_magic(out) == GGUF_MAGIC_PWRI && gguf_is_powerinfer(out), "magic %08x", gguf_magic(out));
    float thr = 0;
    uint32_t tokens = 0;
    CHECK(gguf_get_f32(out, "powerinfer.sparse_threshold", &thr) == 0 && thr == CAL_GLOBAL_THRESHOLD,
          "powerinfer.sparse_threshold %g", thr);
    CHECK(gguf_get_u32(out, "pinfer.calibration.tokens", &tokens) == 0 && tokens == T_TOKENS, "calibration.tokens");
    const char *arch = NULL;
    CHECK(gguf_get_str(out, "general.architecture", &arch) == 0 && !strcmp(arch, "llama"), "source keys copied");
    uint32_t n_layer = 0, n_embd = 0, n_ff = 0;
    CHECK_OK(gguf_get_u32(src, "llama.block_count", &n_layer));
    CHECK_OK(gguf_get_u32(src, "llama.embedding_length", &n_embd));
    CHECK_OK(gguf_get_u32(src, "llama.feed_forward_length", &n_ff));
    CHECK(gguf_n_tensors(out) == gguf_n_tensors(src) + 3 * n_layer, "%zu tensors, source %zu", gguf_n_tensors(out),
          gguf_n_tensors(src));
    /* every source tensor but ffn_down is there with the same bytes */
    for (size_t i = 0; i < gguf_n_tensors(src); i++) {
        const struct gguf_tensor *t = gguf_tensor(src, i);
        if (strstr(t->name, "ffn_down.weight")) {
            CHECK(gguf_find_tensor(out, t->name) == NULL, "%s must be replaced by ffn_down_t", t->name);
            continue;
        }
        const struct gguf_tensor *o = gguf_find_tensor(out, t->name);
        CHECK(o && o->type == t->type && o->nbytes == t->nbytes && !memcmp(o->data, t->data, t->nbytes),
              "%s differs from the source", t->name);
    }
    for (uint32_t l = 0; l < n_layer; l++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%u.ffn_down.weight", l);
        const struct gguf_tensor *d = gguf_find_tensor(src, name);
        snprintf(name, sizeof name, "blk.%u.ffn_down_t.weight", l);
        const struct gguf_tensor *dt = gguf_find_tensor(out, name);
        REQUIRE(d && dt, "layer %u: ffn_down / ffn_down_t missing", l);
        CHECK(dt->type == PI_TYPE_F16 && dt->n_dims == 2 && dt->ne[0] == n_embd && dt->ne[1] == n_ff,
              "layer %u: ffn_down_t ne {%lld, %lld}", l, (long long)dt->ne[0], (long long)dt->ne[1]);
        const uint16_t *a = d->data, *b = dt->data;
        size_t bad = 0;
        for (uint32_t e = 0; e < n_embd; e++)
            for (uint32_t i = 0; i < n_ff; i++)
                bad += a[(size_t)e * n_ff + i] != b[(size_t)i * n_embd + e];
        CHECK(bad == 0, "layer %u: ffn_down_t differs from the transpose of ffn_down in %zu elements", l, bad);
        snprintf(name, sizeof name, "blk.%u.fc1.weight", l);
        const struct gguf_tensor *f1 = gguf_find_tensor(out, name);
        snprintf(name, sizeof name, "blk.%u.fc2.weight", l);
        const struct gguf_tensor *f2 = gguf_find_tensor(out, name);
        snprintf(name, sizeof name, "blk.%u.act_freq", l);
        const struct gguf_tensor *af = gguf_find_tensor(out, name);
        REQUIRE(f1 && f2 && af, "layer %u: predictor tensors missing", l);
        CHECK(f1->type == PI_TYPE_F16 && f1->ne[0] == n_embd && f1->ne[1] == rank, "layer %u: fc1 shape", l);
        CHECK(f2->type == PI_TYPE_F16 && f2->ne[0] == rank && f2->ne[1] == n_ff, "layer %u: fc2 shape", l);
        CHECK(af->type == PI_TYPE_F32 && af->n_dims == 1 && af->ne[0] == n_ff, "layer %u: act_freq shape", l);
        const float *fr = af->data;
        double mean = 0;
        for (uint32_t i = 0; i < n_ff; i++) {
            CHECK(fr[i] >= 0.0f && fr[i] <= 1.0f, "layer %u: act_freq[%u] = %g", l, i, fr[i]);
            mean += fr[i] / n_ff;
        }
        CHECK(mean > 0.01 && mean < 0.6, "layer %u: mean activation frequency %g", l, mean);
    }
    gguf_close(src);
    gguf_close(out);

    struct pi_model *m = NULL;
    CHECK(model_load(&m, out_path) == 0, "model_load(PWRI): %s", pi_errmsg());
    if (m) {
        CHECK(m->hp.powerinfer && m->hp.act == PI_ACT_REGLU && m->hp.sparse_threshold == CAL_GLOBAL_THRESHOLD,
              "PWRI model: powerinfer %d act %d thr %g", m->hp.powerinfer, m->hp.act, m->hp.sparse_threshold);
        model_free(m);
    }
}

/* pwri_write from a q8_0 model: ffn_down_t is requantized q8_0 rows of n_embd that dequantize to
 * the transpose of the dequantized source within one q8_0 step. */
static void check_quant_transpose(const char *q8_path)
{
    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, q8_path) == 0, "load %s: %s", q8_path, pi_errmsg());
    const int32_t E = m->hp.n_embd, F = m->hp.n_ff, L = m->hp.n_layer;
    uint32_t type;
    bool exact;
    CHECK(pwri_down_t_type(PI_TYPE_Q8_0, E, &type, &exact) == 0 && type == PI_TYPE_Q8_0 && !exact, "q8_0 plan");
    CHECK(pwri_down_t_type(PI_TYPE_Q4_0, 48, &type, &exact) == 0 && type == PI_TYPE_F16, "q4_0, 48 → f16");
    CHECK(pwri_down_t_type(PI_TYPE_I32, E, &type, &exact) == -PI_E_UNSUPPORTED, "i32 refused");
    struct cal_pred *p = calloc((size_t)L, sizeof *p);
    struct pwri_layer *pl = calloc((size_t)L, sizeof *pl);
    float *freq = calloc((size_t)F, sizeof *freq);
    for (int l = 0; l < L; l++) {
        REQUIRE(cal_pred_init(&p[l], 2, E, F) == 0, "pred");
        pl[l] = (struct pwri_layer){ .pred = &p[l], .act_freq = freq };
    }
    char out[512];
    snprintf(out, sizeof out, "%s/q8.powerinfer.gguf", tmpdir);
    struct pwri_params pp = { .pred_type = PI_TYPE_F32, .threshold = 0.0f, .data_names = "x", .recall_target = 0.9f };
    struct cal_progress prog;
    prog_init(&prog, true);
    CHECK_OK(pwri_write(out, m->gguf, L, E, F, pl, &pp, &prog));
    struct gguf_file *f = NULL;
    if (gguf_open(&f, out) == 0) {
        const struct gguf_tensor *dt = gguf_find_tensor(f, "blk.1.ffn_down_t.weight");
        const struct gguf_tensor *f1 = gguf_find_tensor(f, "blk.1.fc1.weight");
        REQUIRE(dt && f1, "tensors in the q8_0 PWRI file");
        CHECK(dt->type == PI_TYPE_Q8_0 && dt->ne[0] == E && dt->ne[1] == F, "q8_0 ffn_down_t");
        CHECK(f1->type == PI_TYPE_F32, "--f32-predictor stores f32");
        const struct pi_type_traits *tr = quant_traits(PI_TYPE_Q8_0);
        float *src = malloc(sizeof(float) * (size_t)E * F), *row = malloc(sizeof(float) * (size_t)E);
        const struct pi_tensor *d = &m->layers[1].ffn_down;
        for (int32_t e = 0; e < E; e++)
            tr->to_float((const uint8_t *)d->data + (size_t)e * d->row_bytes, src + (size_t)e * F, F);
        float md = 0, mx = 0;
        for (int32_t i = 0; i < F; i++) {
            tr->to_float((const uint8_t *)dt->data + (size_t)i * quant_row_size(PI_TYPE_Q8_0, E), row, E);
            for (int32_t e = 0; e < E; e++) {
                md = fmaxf(md, fabsf(row[e] - src[(size_t)e * F + i]));
                mx = fmaxf(mx, fabsf(src[(size_t)e * F + i]));
            }
        }
        /* one q8_0 step of the largest block is at most max|x| / 127 */
        CHECK(md <= mx / 127.0f, "requantized ffn_down_t off by %g (max |w| %g)", md, mx);
        free(src);
        free(row);
        gguf_close(f);
    }
    for (int l = 0; l < L; l++) cal_pred_fini(&p[l]);
    free(p), free(pl), free(freq);
    model_free(m);
}

/* A copy of the model whose FFN is declared SwiGLU. */
static void write_swiglu(const char *src_path, const char *out)
{
    struct gguf_file *src = NULL;
    struct gguf_writer *w = NULL;
    REQUIRE(gguf_open(&src, src_path) == 0 && gguf_writer_new(&w, GGUF_MAGIC_GGUF) == 0, "open");
    CHECK_OK(gguf_writer_copy_kv(w, src));
    CHECK_OK(gguf_writer_set_str(w, "pinfer.ffn_activation", "silu"));
    for (size_t i = 0; i < gguf_n_tensors(src); i++) {
        const struct gguf_tensor *t = gguf_tensor(src, i);
        CHECK_OK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data));
    }
    CHECK_OK(gguf_writer_write_file(w, out));
    gguf_writer_free(w);
    gguf_close(src);
}

static void expect_error(const char *what, const char *model, const char *data, int32_t rank, const char *needle)
{
    char out[512];
    snprintf(out, sizeof out, "%s/never.gguf", tmpdir);
    const char *d[] = { data };
    struct cal_opts o;
    cal_opts_defaults(&o);
    o.model = model;
    o.data = d;
    o.n_data = 1;
    o.out = out;
    o.rank = rank;
    o.quiet = true;
    pi_errmsg_clear();
    int rc = cal_run(&o);
    CHECK(rc < 0, "%s: cal_run succeeded", what);
    CHECK(strstr(pi_errmsg(), needle) != NULL, "%s: message '%s' lacks '%s'", what, pi_errmsg(), needle);
    CHECK(access(out, F_OK) != 0, "%s: an output file was left behind", what);
    fprintf(stderr, "%s -> %s\n", what, pi_errmsg());
}

static int argmax(const float *v, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* Greedy continuation of ids (n) by n_gen tokens. With forced (n_gen tokens), the model is fed
 * those instead of its own choices (teacher forcing), so each step is compared in the same context;
 * returns how many of its choices equal them. */
static int32_t greedy(const struct pi_model *m, bool sparse, const int32_t *ids, int32_t n, int32_t n_gen,
                      int32_t *out, const int32_t *forced)
{
    struct pi_ctx *c = NULL;
    struct pi_ctx_params cp = { .n_ctx = n + n_gen + 1, .n_batch = 64, .n_threads = 2, .sparse = sparse };
    REQUIRE(ctx_new(&c, m, &cp) == 0, "ctx_new: %s", pi_errmsg());
    CHECK(ctx_is_sparse(c) == sparse, "ctx_is_sparse %d", ctx_is_sparse(c));
    float *lg = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    CHECK_OK(ctx_eval(c, ids, n, 0, lg, false));
    int32_t agree = 0;
    for (int32_t i = 0; i < n_gen; i++) {
        out[i] = argmax(lg, m->hp.n_vocab);
        agree += forced && out[i] == forced[i];
        CHECK_OK(ctx_eval(c, forced ? &forced[i] : &out[i], 1, n + i, lg, false));
    }
    free(lg);
    ctx_free(c);
    return agree;
}

/* Perplexity over chunks of T_PPL_CHUNK tokens (BOS first), one token per evaluation (decode-shaped,
 * so a sparse FFN follows each token's own mask). */
static double perplexity(const struct pi_model *m, bool sparse, const int32_t *toks, size_t n)
{
    struct pi_ctx *c = NULL;
    struct pi_ctx_params cp = { .n_ctx = T_PPL_CHUNK, .n_batch = 1, .n_threads = 2, .sparse = sparse };
    REQUIRE(ctx_new(&c, m, &cp) == 0, "ctx_new: %s", pi_errmsg());
    const int32_t V = m->hp.n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)V);
    double nll = 0;
    size_t count = 0;
    for (size_t ch = 0; ch < T_PPL_CHUNKS && (ch + 1) * (T_PPL_CHUNK - 1) < n; ch++) {
        const int32_t *t = toks + ch * (T_PPL_CHUNK - 1);
        int32_t prev = tok_bos(m->tok);
        for (int32_t i = 0; i < T_PPL_CHUNK - 1; i++) {
            CHECK_OK(ctx_eval(c, &prev, 1, i, lg, false));
            double mx = lg[0], s = 0;
            for (int32_t v = 1; v < V; v++) mx = fmax(mx, lg[v]);
            for (int32_t v = 0; v < V; v++) s += exp(lg[v] - mx);
            nll += log(s) - (lg[t[i]] - mx);
            count++;
            prev = t[i];
        }
    }
    free(lg);
    ctx_free(c);
    return count ? exp(nll / (double)count) : NAN;
}

static void check_sparse(const char *dense_path, const char *pwri_path, const char *fixtures, const char *held)
{
    struct pi_model *dm = NULL, *sm = NULL;
    REQUIRE(model_load(&dm, dense_path) == 0 && model_load(&sm, pwri_path) == 0, "load: %s", pi_errmsg());
    char path[512];
    snprintf(path, sizeof path, "%s/models/tiny-relu-llama/reference.json", fixtures);
    json_error_t err;
    json_t *ref = json_load_file(path, 0, &err);
    REQUIRE(ref, "%s: %s", path, err.text);
    json_t *cases = json_object_get(ref, "cases");
    size_t same = 0, total = 0, forced_same = 0;
    for (size_t k = 0; k < json_array_size(cases); k++) {
        json_t *cs = json_array_get(cases, k), *pids = json_object_get(cs, "prompt_ids");
        const int32_t n = (int32_t)json_array_size(pids), n_gen = (int32_t)json_array_size(json_object_get(cs, "greedy_ids"));
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), *a = malloc(sizeof(int32_t) * (size_t)n_gen),
                *b = malloc(sizeof(int32_t) * (size_t)n_gen), *tf = malloc(sizeof(int32_t) * (size_t)n_gen);
        for (int32_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pids, (size_t)i));
        greedy(dm, false, ids, n, n_gen, a, NULL);
        greedy(sm, true, ids, n, n_gen, b, NULL);
        const int32_t f = greedy(sm, true, ids, n, n_gen, tf, a);
        size_t s = 0, prefix = 0;
        for (int32_t i = 0; i < n_gen; i++) s += a[i] == b[i];
        while (prefix < (size_t)n_gen && a[prefix] == b[prefix]) prefix++;
        fprintf(stderr, "reference case %zu: sparse greedy equals dense at %zu/%d tokens (first %zu in a row); "
                "%d/%d in dense's context\n", k, s, n_gen, prefix, f, n_gen);
        same += s;
        forced_same += (size_t)f;
        free(tf);
        total += (size_t)n_gen;
        free(ids), free(a), free(b);
    }
    json_decref(ref);
    const double match = total ? (double)same / (double)total : 0;
    const double forced_match = total ? (double)forced_same / (double)total : 0;
    fprintf(stderr, "sparse greedy = dense greedy: %.3f of the tokens free-running, %.3f step by step in dense's "
            "context\n", match, forced_match);
    CHECK(forced_match >= T_SPARSE_MATCH, "sparse greedy matches dense at %.3f of the steps (< %.2f)", forced_match,
          T_SPARSE_MATCH);

    size_t len = 0, n_tok = 0;
    char *text = slurp(held, &len);
    int32_t *toks = NULL;
    REQUIRE(text && tok_encode(dm->tok, text, len, false, false, &toks, &n_tok) == 0, "tokenize held-out text");
    const double pd = perplexity(dm, false, toks, n_tok), ps = perplexity(sm, true, toks, n_tok);
    fprintf(stderr, "sparse vs dense: greedy match %.3f; held-out perplexity dense %.3f, sparse %.3f (%+.2f%%)\n", match,
            pd, ps, 100.0 * (ps / pd - 1.0));
    CHECK(fabs(ps / pd - 1.0) <= T_PPL_TOL, "sparse perplexity %.3f vs dense %.3f", ps, pd);
    free(text);
    free(toks);
    model_free(dm);
    model_free(sm);
}

/* Run "PICTL calibrate ARGS", stderr to a file; returns the exit status and the stderr text. */
static int run_pictl(const char *pictl, const char *args, char **err_text)
{
    char cmd[4096], errf[512];
    snprintf(errf, sizeof errf, "%s/stderr.txt", tmpdir);
    snprintf(cmd, sizeof cmd, "'%s' calibrate %s >/dev/null 2>'%s'", pictl, args, errf);
    const int st = system(cmd);
    size_t len = 0;
    *err_text = slurp(errf, &len);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check_cli(const char *pictl, const char *f16, const char *train)
{
    char args[2048], *err = NULL;
    int rc = run_pictl(pictl, "", &err);
    CHECK(rc == 2 && err && strstr(err, "need MODEL.gguf"), "no arguments: exit %d, '%s'", rc, err ? err : "");
    free(err);
    snprintf(args, sizeof args, "'%s' --data '%s/nothing.txt' -o '%s/x.gguf'", f16, tmpdir, tmpdir);
    rc = run_pictl(pictl, args, &err);
    CHECK(rc == 1 && err && strstr(err, "cannot open data file"), "missing data: exit %d, '%s'", rc, err ? err : "");
    free(err);
    snprintf(args, sizeof args, "'%s' --data '%s' --recall 1.5 -o '%s/x.gguf'", f16, train, tmpdir);
    rc = run_pictl(pictl, args, &err);
    CHECK(rc == 2 && err && strstr(err, "--recall"), "--recall 1.5: exit %d, '%s'", rc, err ? err : "");
    free(err);
    /* determinism: same seed and threads, same bytes */
    char *file[2] = { NULL, NULL };
    size_t len[2] = { 0, 0 };
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "'%s' --data '%s' --tokens 512 --heldout 256 --rank 16 --epochs 1 -t 2 -q --seed 42 "
                 "-o '%s/det%d.gguf'", f16, train, tmpdir, i);
        rc = run_pictl(pictl, args, &err);
        CHECK(rc == 0, "pictl calibrate: exit %d, '%s'", rc, err ? err : "");
        free(err);
        char path[600];
        snprintf(path, sizeof path, "%s/det%d.gguf", tmpdir, i);
        file[i] = slurp(path, &len[i]);
    }
    CHECK(file[0] && file[1] && len[0] == len[1] && len[0] > 0 && !memcmp(file[0], file[1], len[0]),
          "two runs with one seed differ (%zu and %zu bytes)", len[0], len[1]);
    free(file[0]);
    free(file[1]);

    /* the output is never an input (issue 7, item 6): the same path, a symlink to it, the data file */
    char self[600], link_path[600];
    snprintf(self, sizeof self, "%s/self.gguf", tmpdir);
    snprintf(link_path, sizeof link_path, "%s/self-link.gguf", tmpdir);
    size_t n0 = 0, n1 = 0;
    char *orig = slurp(f16, &n0);
    FILE *fo = fopen(self, "wb");
    REQUIRE(orig && fo && fwrite(orig, 1, n0, fo) == n0, "cannot copy %s", f16);
    fclose(fo);
    REQUIRE(symlink(self, link_path) == 0, "symlink: %s", strerror(errno));
    const char *outs[] = { self, link_path, train };
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "'%s' --data '%s' --tokens 512 --heldout 256 --rank 16 --epochs 1 -q -o '%s'", self,
                 train, outs[i]);
        rc = run_pictl(pictl, args, &err);
        CHECK(rc == 1 && err && strstr(err, "the same file"), "-o %s: exit %d, '%s'", outs[i], rc, err ? err : "");
        free(err);
    }
    char *after = slurp(self, &n1);
    CHECK(after && n1 == n0 && !memcmp(after, orig, n0), "the input model was modified");
    free(after);
    free(orig);

    /* progress numbers layers from 0, as the table, the JSON and blk.N do (issue 7, item 12) */
    snprintf(args, sizeof args, "'%s' --data '%s' --tokens 512 --heldout 256 --rank 16 --epochs 1 -t 2 -o '%s/prog.gguf'",
             f16, train, tmpdir);
    rc = run_pictl(pictl, args, &err);
    CHECK(rc == 0 && err && strstr(err, "layer 0 (1 of ") && !strstr(err, "layer 1/"),
          "progress layer numbers: exit %d, '%.300s'", rc, err ? err : "");
    free(err);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        SKIP("usage: test_calibrate MODEL_F16.gguf MODEL_Q8_0.gguf");
    const char *f16 = argv[1], *q8 = argv[2];
    const char *fixtures = getenv("PINFER_FIXTURES");
    if (!fixtures)
        SKIP("PINFER_FIXTURES (tests/fixtures) is not set: run it with meson test");
    snprintf(tmpdir, sizeof tmpdir, "%s/pinfer-cal-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    REQUIRE(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
    quant_init();

    test_gemm();
    test_threshold();

    char train[512], held[512], out[512], swiglu[512], missing[512];
    write_corpus(fixtures, train, held, sizeof train);
    snprintf(out, sizeof out, "%s/tiny.powerinfer.gguf", tmpdir);
    snprintf(swiglu, sizeof swiglu, "%s/swiglu.gguf", tmpdir);
    snprintf(missing, sizeof missing, "%s/no-such-file.txt", tmpdir);

    /* bad input first: they are quick and must not leave files */
    write_swiglu(f16, swiglu);
    expect_error("missing data file", f16, missing, 0, "no-such-file.txt");
    expect_error("SwiGLU model", swiglu, train, 0, "calibrate needs a ReLU-family model");
    expect_error("--rank > n_embd", f16, train, 257, "larger than n_embd");
    char small[512];
    snprintf(small, sizeof small, "%s/small.txt", tmpdir);
    FILE *fs = fopen(small, "w");
    REQUIRE(fs, "cannot write %s", small);
    for (int i = 0; i < 100; i++)
        fputs("A fool and his money are soon parted. ", fs);
    fclose(fs);
    expect_error("too little text", f16, small, 0, "the text has");

    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, f16) == 0, "load %s", f16);
    json_t *stats = run_calibration(f16, train, held, out);
    check_stats(stats, m);
    json_decref(stats);
    model_free(m);
    check_pwri(f16, out, T_RANK);
    expect_error("PWRI input", out, train, 0, "already a PowerInfer");
    check_quant_transpose(q8);
    check_sparse(f16, out, fixtures, held);
    if (argc > 3)
        check_cli(argv[3], f16, train);

    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "note: could not remove %s\n", tmpdir);
    return tu_finish("calibrate");
}
