/* test_synth — pictl synth on the tiny shape: the files load and generate, the measured active
 * fraction per layer is 1 - sparsity, the hottest 30 % carry the designed share, the PowerInfer twin
 * holds the same weights (ffn_down_t = ffn_down transposed) and its predictor's recall is >= 0.95,
 * same seed → same bytes, and bad options give errors.
 *
 *   test_synth PICTL */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model.h"
#include "pi_err.h"
#include "quant.h"
#include "synth.h"
#include "testutil.h"
#include "tokenizer.h"

#define PATH_CAP 512
#define MEASURE_TOKENS 512
#define FRAC_TOL 0.01       /* active fraction: 10 % of the target 0.1, far beyond sampling noise */
#define HOT_TOL 0.03
#define RECALL_MIN 0.95
#define SEED 11
#define N_GEN 8

static char tmp_root[PATH_CAP];

static void path_in_tmp(char *buf, const char *name)
{
    int n = snprintf(buf, PATH_CAP, "%s/%s", tmp_root, name);
    REQUIRE(n > 0 && n < PATH_CAP, "path too long");
}

static void tiny_opts(struct synth_opts *o, uint32_t type, bool pwri, const char *path)
{
    synth_opts_default(o);
    REQUIRE(synth_shape_parse(&o->shape, "tiny") == 0, "tiny shape: %s", pi_errmsg());
    o->type = type;
    o->pwri = pwri;
    o->seed = SEED;
    o->out_path = path;
    o->quiet = true;
    o->n_threads = 2;
}

static void write_tiny(uint32_t type, bool pwri, const char *path)
{
    struct synth_opts o;
    tiny_opts(&o, type, pwri, path);
    int rc = synth_write(&o);
    REQUIRE(rc == 0, "synth_write %s: %s", path, pi_errmsg());
}

static void test_errors(void)
{
    struct synth_shape s;
    CHECK(synth_shape_parse(&s, "llama-7b") == 0 && s.n_embd == 4096 && s.n_ff == 11008 && s.n_layer == 32, "7b");
    CHECK(synth_shape_parse(&s, "512,2048,2,8,4") == 0 && s.n_head_kv == 4, "custom shape");
    CHECK(synth_shape_parse(&s, "512,2048,2") == -PI_E_INVAL, "short shape");
    CHECK(synth_shape_parse(&s, "llama-99b") == -PI_E_INVAL, "unknown shape");
    char path[PATH_CAP];
    path_in_tmp(path, "bad.gguf");
    struct synth_opts o;
    tiny_opts(&o, PI_TYPE_F16, false, path);
    o.sparsity = 1.5;
    CHECK(synth_write(&o) == -PI_E_INVAL, "sparsity 1.5 accepted");
    tiny_opts(&o, PI_TYPE_F16, false, path);
    o.hot_share = 0.2; /* below 0.3: a uniform law already gives the hottest 30 % that much */
    CHECK(synth_write(&o) == -PI_E_INVAL, "hot share 0.2 accepted");
    tiny_opts(&o, PI_TYPE_Q4_0, false, path);
    CHECK(synth_shape_parse(&o.shape, "200,1024,2,4,4") == 0, "parse");
    CHECK(synth_write(&o) == -PI_E_INVAL, "n_embd 200 accepted for q4_0");
    tiny_opts(&o, PI_TYPE_F16, false, NULL);
    CHECK(synth_write(&o) == -PI_E_INVAL, "no output path accepted");
    CHECK(access(path, F_OK) != 0, "a failed write left %s", path);
    /* --hot-share picks the exponent: the design then carries that share */
    struct synth_design d;
    tiny_opts(&o, PI_TYPE_F16, false, path);
    o.hot_share = 0.7;
    CHECK_OK(synth_design_get(&o, &d));
    CHECK(fabs(d.hot_share - 0.7) < 1e-3, "hot share %f for --hot-share 0.7", d.hot_share);
}

static void check_stats(const char *what, const struct synth_stats *st, double hot_design, bool pred)
{
    for (int32_t l = 0; l < st->n_layer; l++) {
        CHECK(fabs(st->active_frac[l] - 0.1) < FRAC_TOL, "%s layer %d: active fraction %.4f", what, l,
              st->active_frac[l]);
        CHECK(fabs(st->hot_share[l] - hot_design) < HOT_TOL, "%s layer %d: hot share %.4f, designed %.4f", what, l,
              st->hot_share[l], hot_design);
    }
    if (pred) {
        CHECK(st->recall >= RECALL_MIN, "%s: recall %.4f", what, st->recall);
        CHECK(fabs(st->predicted_frac - 0.1) < FRAC_TOL, "%s: predicted fraction %.4f", what, st->predicted_frac);
        CHECK(st->sparse_bytes > 0 && st->sparse_bytes < st->dense_bytes, "%s: sparse bytes %.0f, dense %.0f", what,
              st->sparse_bytes, st->dense_bytes);
    } else {
        CHECK(st->recall < 0, "%s: recall without a predictor", what);
    }
    fprintf(stderr, "%s: active %.4f %.4f %.4f %.4f, hot %.3f, recall %.4f\n", what, st->active_frac[0],
            st->active_frac[1], st->active_frac[2], st->active_frac[3], st->hot_share[0], st->recall);
}

static void measure(const char *what, const char *model, const char *pred, double hot_design)
{
    struct synth_stats st;
    int rc = synth_measure(model, pred, MEASURE_TOKENS, SEED, 2, &st);
    CHECK(rc == 0, "measure %s: %s", what, pi_errmsg());
    if (rc)
        return;
    CHECK(st.n_layer == 4 && st.n_ff == 1024 && st.n_tokens == MEASURE_TOKENS, "%s: shape", what);
    check_stats(what, &st, hot_design, pred != NULL || strstr(what, "pwri"));
    synth_stats_fini(&st);
}

/* ffn_down_t row i == ffn_down column i (f16: the same f32 value rounded once). */
static void check_twin(const char *dense, const char *pwri)
{
    struct pi_model *md = NULL, *mp = NULL;
    CHECK_OK(model_load(&md, dense));
    CHECK_OK(model_load(&mp, pwri));
    if (!md || !mp)
        goto out;
    CHECK(mp->hp.powerinfer && !md->hp.powerinfer, "powerinfer flags");
    CHECK(md->hp.act == PI_ACT_REGLU && mp->hp.act == PI_ACT_REGLU, "activation is not ReGLU");
    CHECK(md->hp.n_embd == 256 && md->hp.n_ff == 1024 && md->hp.n_layer == 4 && md->hp.n_head_kv == 2 &&
              md->hp.n_vocab == 1024, "hparams");
    CHECK(mp->hp.sparse_threshold == 0.0f, "threshold %f", mp->hp.sparse_threshold);
    for (int l = 0; l < md->hp.n_layer; l++) {
        const struct pi_layer *a = &md->layers[l], *b = &mp->layers[l];
        REQUIRE(a->ffn_down.data && b->ffn_down_t.data && b->fc1.data && b->fc2.data, "layer %d tensors", l);
        CHECK(!memcmp(a->ffn_gate.data, b->ffn_gate.data, a->ffn_gate.row_bytes * (size_t)a->ffn_gate.ne[1]),
              "layer %d: gate differs between twins", l);
        CHECK(b->fc1.ne[1] == 128 && b->fc2.ne[0] == 128, "layer %d: rank %lld", l, (long long)b->fc1.ne[1]);
        int bad = 0;
        for (int64_t i = 0; i < md->hp.n_ff; i += 37)
            for (int64_t e = 0; e < md->hp.n_embd; e += 5) {
                pi_f16 x, y;
                memcpy(&x, (const char *)a->ffn_down.data + (size_t)e * a->ffn_down.row_bytes + 2 * (size_t)i, 2);
                memcpy(&y, (const char *)b->ffn_down_t.data + (size_t)i * b->ffn_down_t.row_bytes + 2 * (size_t)e, 2);
                bad += x != y;
            }
        CHECK(bad == 0, "layer %d: %d elements of ffn_down_t differ from ffn_down transposed", l, bad);
    }
    /* the tokenizer: byte fallback and pieces */
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    size_t len = 0;
    const char *s = "hello world, ünïcode!";
    CHECK_OK(tok_encode(md->tok, s, strlen(s), true, false, &ids, &n));
    CHECK(n > 2 && ids[0] == 1, "encode: %zu ids", n);
    CHECK_OK(tok_decode(md->tok, ids + 1, n - 1, true, &text, &len));
    CHECK(text && !strcmp(text, s), "round trip: '%s'", text ? text : "(null)");
    free(ids);
    free(text);
out:
    model_free(md);
    model_free(mp);
}

/* The --pwri file's act_freq is each neuron's true firing frequency: in every layer neuron i fires
 * for token t iff gate_i · embd_t > 0 (the gate reads only dims attention and the FFN never write,
 * rmsnorm scales by a positive number), so counting that over the whole vocabulary measures it. The
 * dense file has no act_freq (it carries no sparse statistics). */
#define N_CONTROL 3 /* <unk> <s> </s>: never sampled as tokens */
#define FREQ_MEAN_TOL 0.02 /* mean |measured - act_freq| over neurons; sampling noise alone ~0.005 */
static void check_act_freq(const char *dense, const char *pwri, int32_t sub_dim)
{
    struct pi_model *md = NULL, *mp = NULL;
    CHECK_OK(model_load(&md, dense));
    CHECK_OK(model_load(&mp, pwri));
    if (!md || !mp)
        goto out;
    const int64_t E = mp->hp.n_embd, F = mp->hp.n_ff, V = mp->hp.n_vocab;
    float *emb = malloc((size_t)(V * E) * sizeof *emb), *gate = malloc((size_t)(F * E) * sizeof *gate);
    REQUIRE(emb && gate, "out of memory");
    const struct pi_tensor *te = &mp->token_embd;
    for (int64_t t = 0; t < V; t++)
        quant_traits(te->type)->to_float((const char *)te->data + (size_t)t * te->row_bytes, emb + t * E, E);
    for (int l = 0; l < mp->hp.n_layer; l++) {
        CHECK(md->layers[l].act_freq == NULL, "layer %d: the dense file has act_freq", l);
        const float *af = mp->layers[l].act_freq;
        REQUIRE(af, "layer %d: the --pwri file has no act_freq", l);
        const struct pi_tensor *tg = &mp->layers[l].ffn_gate;
        for (int64_t i = 0; i < F; i++)
            quant_traits(tg->type)->to_float((const char *)tg->data + (size_t)i * tg->row_bytes, gate + i * E, E);
        double diff = 0.0, sum = 0.0;
        for (int64_t i = 0; i < F; i++) {
            int64_t fired = 0;
            for (int64_t t = N_CONTROL; t < V; t++) {
                double dot = 0.0;
                for (int64_t e = 0; e < SYNTH_SUB_OFF + sub_dim; e++) /* the gate is 0 past the subspace */
                    dot += (double)gate[i * E + e] * emb[t * E + e];
                fired += dot > 0.0;
            }
            const double meas = (double)fired / (double)(V - N_CONTROL);
            CHECK(af[i] >= 0.0f && af[i] <= 1.0f, "layer %d neuron %lld: act_freq %g", l, (long long)i, af[i]);
            diff += fabs(meas - af[i]);
            sum += af[i];
        }
        CHECK(diff / (double)F < FREQ_MEAN_TOL, "layer %d: act_freq is off the measured frequency by %.4f on average",
              l, diff / (double)F);
        CHECK(fabs(sum / (double)F - (1.0 - 0.9)) < 0.005, "layer %d: mean act_freq %.4f", l, sum / (double)F);
        if (l == 0)
            fprintf(stderr, "act_freq layer 0: mean |measured - act_freq| %.4f\n", diff / (double)F);
    }
    free(emb);
    free(gate);
out:
    model_free(md);
    model_free(mp);
}

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        same = x == y;
        if (x == EOF || y == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* `pictl run` generates N_GEN tokens, none of them control tokens. */
static void check_run(const char *pictl, const char *model)
{
    char stats[PATH_CAP], cmd[4 * PATH_CAP];
    path_in_tmp(stats, "stats.json");
    snprintf(cmd, sizeof cmd, "'%s' run --inproc -m '%s' -p 'hello world' -n %d -t 2 --temp 0 --json-stats '%s' >/dev/null",
             pictl, model, N_GEN, stats);
    int st = system(cmd);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "pictl run on %s: status %d", model, st);
    json_error_t err;
    json_t *j = json_load_file(stats, 0, &err);
    CHECK(j != NULL, "%s: %s", stats, err.text);
    if (!j)
        return;
    json_t *toks = json_object_get(j, "tokens");
    CHECK(json_integer_value(json_object_get(j, "n_gen")) == N_GEN && json_array_size(toks) == N_GEN,
          "%s: generated %lld tokens", model, (long long)json_integer_value(json_object_get(j, "n_gen")));
    for (size_t i = 0; i < json_array_size(toks); i++)
        CHECK(json_integer_value(json_array_get(toks, i)) >= 3, "%s: control token generated", model);
    json_decref(j);
    unlink(stats);
}

/* `pictl synth` reports progress also when stderr is not a terminal (a 7B file took 33 s in
 * silence): lines with the bytes written and the layer, ending at 100 %. */
static void check_progress(const char *pictl)
{
    char out[PATH_CAP], err[PATH_CAP], cmd[4 * PATH_CAP];
    path_in_tmp(out, "progress.gguf");
    path_in_tmp(err, "progress.txt");
    snprintf(cmd, sizeof cmd, "'%s' synth --shape tiny -o '%s' 2>'%s'", pictl, out, err);
    int st = system(cmd);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "pictl synth: status %d", st);
    FILE *f = fopen(err, "r");
    REQUIRE(f, "open %s", err);
    char line[512];
    int n = 0, last_pct = -1, bad = 0;
    bool layer_seen = false;
    while (fgets(line, sizeof line, f)) {
        const char *w = strstr(line, " written (");
        if (!w)
            continue;
        int pct = atoi(w + strlen(" written ("));
        bad += pct < last_pct;
        last_pct = pct;
        layer_seen = layer_seen || strstr(line, ", layer 1 of 4") || strstr(line, ", layer 4 of 4");
        n++;
    }
    fclose(f);
    CHECK(n >= 5 && last_pct == 100 && bad == 0 && layer_seen, "progress: %d lines, last %d%%, %d backwards, layer %d",
          n, last_pct, bad, layer_seen);
}

/* --type q4_k_m: the mixture's types written directly (what pictl quantize picks: Q6_K for the
 * output and some attn_v / ffn_down_t, Q4_K elsewhere), predictors at --pred-type; it runs */
static void check_mix(const char *pictl, const char *path)
{
    struct synth_opts o;
    tiny_opts(&o, PI_TYPE_Q4_K, true, path);
    o.mix = "q4_k_m";
    o.pred_type = PI_TYPE_Q8_0;
    CHECK_OK(synth_write(&o));
    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, path) == 0, "load %s: %s", path, pi_errmsg());
    CHECK(m->output.type == PI_TYPE_Q6_K, "q4_k_m output: %s", quant_traits(m->output.type)->name);
    CHECK(m->layers[0].ffn_gate.type == PI_TYPE_Q4_K && m->layers[0].wq.type == PI_TYPE_Q4_K, "q4_k_m gate/q: %s/%s",
          quant_traits(m->layers[0].ffn_gate.type)->name, quant_traits(m->layers[0].wq.type)->name);
    const int last = m->hp.n_layer - 1; /* llama.cpp's use_more_bits: the last eighth of the layers */
    CHECK(m->layers[last].wv.type == PI_TYPE_Q6_K && m->layers[last].ffn_down_t.type == PI_TYPE_Q6_K,
          "q4_k_m last attn_v / ffn_down_t: %s / %s", quant_traits(m->layers[last].wv.type)->name,
          quant_traits(m->layers[last].ffn_down_t.type)->name);
    CHECK(m->layers[0].fc1.type == PI_TYPE_Q8_0 && m->layers[0].fc2.type == PI_TYPE_Q8_0, "predictors keep q8_0");
    model_free(m);
    check_run(pictl, path);
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2, "usage: test_synth PICTL");
    snprintf(tmp_root, sizeof tmp_root, "/tmp/pinfer-test-synth-XXXXXX");
    REQUIRE(mkdtemp(tmp_root), "mkdtemp: %s", strerror(errno));
    char dense[PATH_CAP], dense2[PATH_CAP], pwri[PATH_CAP], q4[PATH_CAP], q4p[PATH_CAP];
    path_in_tmp(dense, "tiny-f16.gguf");
    path_in_tmp(dense2, "tiny-f16-again.gguf");
    path_in_tmp(pwri, "tiny-f16-pwri.gguf");
    path_in_tmp(q4, "tiny-q4_0.gguf");
    path_in_tmp(q4p, "tiny-q4_0-pwri.gguf");

    test_errors();
    struct synth_opts o;
    struct synth_design d;
    tiny_opts(&o, PI_TYPE_F16, false, dense);
    CHECK_OK(synth_design_get(&o, &d));
    CHECK(d.hot_share > 0.75 && d.hot_share < 0.85, "default law: hottest 30%% carry %.3f", d.hot_share);
    CHECK(d.sub_dim == 63 && d.rank == 128, "subspace %d, rank %d", d.sub_dim, d.rank);

    write_tiny(PI_TYPE_F16, false, dense);
    write_tiny(PI_TYPE_F16, false, dense2);
    CHECK(same_file(dense, dense2), "same seed, different bytes");
    write_tiny(PI_TYPE_F16, true, pwri);
    write_tiny(PI_TYPE_Q4_0, false, q4);
    write_tiny(PI_TYPE_Q4_0, true, q4p);

    check_twin(dense, pwri);
    check_act_freq(dense, pwri, d.sub_dim);
    measure("f16 dense", dense, NULL, d.hot_share);
    measure("f16 twin predictor", dense, pwri, d.hot_share);
    measure("f16 pwri", pwri, NULL, d.hot_share);
    measure("q4_0 twin predictor", q4, q4p, d.hot_share);
    check_run(argv[1], dense);
    check_run(argv[1], q4p);
    check_progress(argv[1]);
    char mix[PATH_CAP];
    path_in_tmp(mix, "tiny-q4_k_m-pwri.gguf");
    check_mix(argv[1], mix);
    unlink(mix);

    unlink(dense), unlink(dense2), unlink(pwri), unlink(q4), unlink(q4p);
    rmdir(tmp_root);
    return tu_finish("synth");
}
