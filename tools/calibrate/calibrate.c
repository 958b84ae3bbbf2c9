/* calibrate.c — the driver of `pictl calibrate`: load the model, record activations on the
 * calibration text, train and fold one predictor per layer, write the PWRI file and the reports.
 * calibrate.h explains the threshold folding and the rank rule. */
#include "calibrate.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cal_internal.h"
#include "generate.h" /* pi_now_ms */
#include "gguf.h"
#include "model.h"
#include "pi_err.h"
#include "quant.h"
#include "tokenizer.h"

#define CAL_DEFAULT_TOKENS 16384
#define CAL_DEFAULT_HELDOUT 2048
#define CAL_DEFAULT_EVAL_TOKENS 4096
#define CAL_DEFAULT_CHUNK 256
#define CAL_DEFAULT_RECALL 0.99f
#define CAL_RANK_MIN 32
/* The threshold is chosen for a slightly higher recall than asked, R + margin·(1 - R), so that the
 * f16 rounding of the stored weights and text the predictor has not seen keep the target. */
#define CAL_RECALL_MARGIN 0.5
/* A layer threshold that is not negative is lowered to -CAL_NEG_FLOOR · (logit std) before folding
 * (lowering a threshold only adds recall); keeps the fold factor finite and positive. */
#define CAL_NEG_FLOOR 0.05f
/* Multiply-adds of the dense FFN per token and neuron row: gate, up and down. */
#define CAL_FFN_MATS 3
#define CAL_F16_MAX 65504.0f

void cal_opts_defaults(struct cal_opts *o)
{
    memset(o, 0, sizeof *o);
    o->tokens = CAL_DEFAULT_TOKENS;
    o->heldout = CAL_DEFAULT_HELDOUT;
    o->eval_tokens = CAL_DEFAULT_EVAL_TOKENS;
    o->chunk = CAL_DEFAULT_CHUNK;
    o->recall = CAL_DEFAULT_RECALL;
    o->n_threads = 1;
    o->seed = 0x5eed;
}

struct cal_layer {
    struct cal_pred pred;
    float layer_thr, logit_std;
    struct cal_stats held, eval;
    bool has_eval;
    float *act_freq; /* (n_ff) */
};

static int read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pi_fail(errno, "calibrate: cannot open data file '%s': %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0, n = 0;
    int rc = 0;
    for (;;) {
        if (n + 1 >= cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *nb = realloc(buf, cap);
            if (!nb) {
                rc = pi_fail(PI_E_NOMEM, "calibrate: '%s' is too large", path);
                break;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    if (!rc && ferror(f))
        rc = pi_fail(PI_E_IO, "calibrate: cannot read '%s'", path);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* Tokens of all files, concatenated, without BOS. */
static int tokenize_files(const struct pi_tokenizer *tok, const char **paths, int n, int32_t **out, size_t *n_out)
{
    int32_t *all = NULL;
    size_t n_all = 0;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char *text = NULL;
        size_t len = 0, nt = 0;
        int32_t *t = NULL;
        if ((rc = read_file(paths[i], &text, &len)))
            break;
        rc = tok_encode(tok, text, len, false, false, &t, &nt);
        free(text);
        if (rc)
            break;
        int32_t *na = realloc(all, (n_all + nt + 1) * sizeof *na);
        if (!na) {
            free(t);
            rc = pi_fail(PI_E_NOMEM, "calibrate: out of memory for tokens");
            break;
        }
        all = na;
        memcpy(all + n_all, t, nt * sizeof *t);
        n_all += nt;
        free(t);
    }
    if (rc) {
        free(all);
        return rc;
    }
    *out = all;
    *n_out = n_all;
    return 0;
}

static int check_model(const struct pi_model *m, const struct cal_opts *o)
{
    const struct pi_hparams *hp = &m->hp;
    if (gguf_is_powerinfer(m->gguf))
        return pi_fail(PI_E_INVAL, "calibrate: %s is already a PowerInfer (PWRI) file; calibrate the dense GGUF",
                       o->model);
    if (hp->act != PI_ACT_REGLU && hp->act != PI_ACT_DRELU)
        return pi_fail(PI_E_UNSUPPORTED,
                       "calibrate needs a ReLU-family model (ReGLU or dReLU FFN): %s uses %s, whose neurons are never "
                       "exactly inactive", o->model, model_act_name(hp->act));
    if (o->rank > hp->n_embd)
        return pi_fail(PI_E_RANGE, "calibrate: --rank %d is larger than n_embd = %d (a predictor's rank is at most "
                       "its input size)", o->rank, hp->n_embd);
    for (int l = 0; l < hp->n_layer; l++) {
        uint32_t type;
        bool exact;
        int rc = pwri_down_t_type(m->layers[l].ffn_down.type, hp->n_embd, &type, &exact);
        if (rc)
            return rc;
    }
    return 0;
}

/* Recall the threshold is chosen for (see CAL_RECALL_MARGIN). */
static double fit_recall(const struct cal_opts *o)
{
    return o->recall + CAL_RECALL_MARGIN * (1.0 - o->recall);
}

/* gate (n_ff, n_embd) = the layer's gate rows ⊙ ffn_norm weight, in f32 (init_gate.c says why). */
static int layer_gate(const struct pi_model *m, int layer, float **out)
{
    const struct pi_layer *l = &m->layers[layer];
    const int32_t E = m->hp.n_embd, F = m->hp.n_ff;
    const struct pi_type_traits *tr = quant_traits(l->ffn_gate.type);
    const float *nw = l->ffn_norm.data;
    float *gate = malloc((size_t)F * E * sizeof *gate);
    if (!gate)
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory");
    for (int32_t j = 0; j < F; j++) {
        float *row = gate + (size_t)j * E;
        tr->to_float((const uint8_t *)l->ffn_gate.data + (size_t)j * l->ffn_gate.row_bytes, row, E);
        for (int32_t i = 0; i < E; i++)
            row[i] *= nw[i];
    }
    *out = gate;
    return 0;
}

/* Train a rank-r predictor and measure it on the held-out rows at its own threshold. */
static int try_rank(const struct cal_gemm *g, const struct cal_rec *rec, int layer, const float *gate, int32_t r,
                    const struct cal_train_params *tp, const struct cal_opts *o, struct cal_layer *out,
                    struct cal_progress *prog)
{
    int rc;
    if ((rc = cal_pred_init(&out->pred, r, rec->n_embd, rec->n_ff)))
        return rc;
    /* layers are numbered from 0 everywhere (blk.N, the table, the JSON); "(k of n)" counts */
    prog_begin(prog, "layer %d (%d of %d): training rank %d", layer, layer + 1, rec->n_layer, r);
    if ((rc = cal_train(g, rec, layer, gate, tp, &out->pred, prog)) ||
        (rc = cal_threshold(g, rec, layer, rec->n_train, rec->n_rows, &out->pred, fit_recall(o), &out->layer_thr,
                            &out->logit_std)) ||
        (rc = cal_evaluate(g, rec, layer, rec->n_train, rec->n_rows, &out->pred, out->layer_thr, &out->held)))
        cal_pred_fini(&out->pred);
    prog_end(prog, NULL);
    return rc;
}

/* Per-token multiply-adds of predictor + predicted-active FFN rows (calibrate.h: the rank rule). */
static double layer_cost(const struct cal_rec *rec, int32_t r, const struct cal_stats *st)
{
    const double E = rec->n_embd, F = rec->n_ff;
    return r * (E + F) + cal_pred_frac(st) * CAL_FFN_MATS * E * F;
}

static int fit_layer(const struct cal_gemm *g, const struct cal_rec *rec, int layer, const float *gate,
                     const struct cal_opts *o, const struct cal_train_params *tp, struct cal_layer *out,
                     struct cal_progress *prog)
{
    if (o->rank > 0)
        return try_rank(g, rec, layer, gate, o->rank, tp, o, out, prog);
    int rc;
    double best_cost = INFINITY;
    bool have = false;
    for (int32_t r = CAL_RANK_MIN < rec->n_embd ? CAL_RANK_MIN : rec->n_embd;; r *= 2) {
        if (r > rec->n_embd)
            r = rec->n_embd;
        if (have && r * (double)(rec->n_embd + rec->n_ff) >= best_cost)
            break; /* its predictor alone would cost more than the best total */
        struct cal_layer cand = { 0 };
        if ((rc = try_rank(g, rec, layer, gate, r, tp, o, &cand, prog)))
            return rc;
        const double cost = layer_cost(rec, r, &cand.held);
        if (!o->quiet)
            fprintf(stderr, "calibrate: layer %d rank %4d: recall %.4f, predicted active %.3f (true %.3f), cost %.0f\n",
                    layer, r, cal_recall(&cand.held), cal_pred_frac(&cand.held), cal_true_frac(&cand.held), cost);
        if (cost < best_cost) {
            if (have)
                cal_pred_fini(&out->pred);
            *out = cand;
            best_cost = cost;
            have = true;
        } else {
            cal_pred_fini(&cand.pred);
        }
        if (r >= rec->n_embd)
            break;
    }
    return 0;
}

/* Fold the layer threshold into the weights (calibrate.h), round them as stored, and measure the
 * stored predictor at the global threshold. */
static int fold_layer(const struct cal_gemm *g, const struct cal_rec *rec, const struct cal_rec *ev, int layer,
                      const struct cal_opts *o, struct cal_layer *L)
{
    struct cal_pred *p = &L->pred;
    float t = L->layer_thr;
    const float floor_neg = -CAL_NEG_FLOOR * (L->logit_std > 0.0f ? L->logit_std : 1.0f);
    if (t > floor_neg)
        t = floor_neg;
    const float s = sqrtf(CAL_GLOBAL_THRESHOLD / t); /* each of fc1, fc2 takes sqrt of the factor */
    const size_t n1 = (size_t)p->rank * p->n_embd, n2 = (size_t)p->n_ff * p->rank;
    float *w[2] = { p->w1, p->w2 };
    const size_t n[2] = { n1, n2 };
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < n[k]; i++) {
            float v = w[k][i] * s;
            if (!o->f32_pred) {
                if (!(fabsf(v) <= CAL_F16_MAX))
                    return pi_fail(PI_E_RANGE, "calibrate: layer %d's predictor weight %g does not fit f16 (use "
                                   "--f32-predictor)", layer, (double)v);
                v = pi_f16_to_f32(pi_f32_to_f16(v));
            }
            w[k][i] = v;
        }
    int rc = cal_evaluate(g, rec, layer, rec->n_train, rec->n_rows, p, CAL_GLOBAL_THRESHOLD, &L->held);
    if (!rc && ev && ev->n_rows > 0) {
        rc = cal_evaluate(g, ev, layer, 0, ev->n_rows, p, CAL_GLOBAL_THRESHOLD, &L->eval);
        L->has_eval = true;
    }
    return rc;
}

static uint64_t pred_bytes(const struct cal_pred *p, bool f32)
{
    return (uint64_t)p->rank * (uint64_t)(p->n_embd + p->n_ff) * (f32 ? sizeof(float) : sizeof(pi_f16));
}

static void print_table(FILE *f, const struct cal_layer *L, int32_t n_layer, const struct cal_opts *o)
{
    fprintf(f, "%5s %5s %8s %9s %11s %11s %11s %10s\n", "layer", "rank", "recall", "precision", "pred_active",
            "true_active", "eval_recall", "predictor");
    for (int32_t l = 0; l < n_layer; l++) {
        const struct cal_layer *x = &L[l];
        char ev[16] = "-";
        if (x->has_eval)
            snprintf(ev, sizeof ev, "%.4f", cal_recall(&x->eval));
        fprintf(f, "%5d %5d %8.4f %9.4f %11.4f %11.4f %11s %6.1f KiB\n", l, x->pred.rank, cal_recall(&x->held),
                cal_precision(&x->held), cal_pred_frac(&x->held), cal_true_frac(&x->held), ev,
                (double)pred_bytes(&x->pred, o->f32_pred) / 1024.0);
    }
}

static json_t *stats_json(const struct cal_stats *s)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:I}", "recall", cal_recall(s), "precision", cal_precision(s),
                     "pred_active", cal_pred_frac(s), "true_active", cal_true_frac(s), "pairs", (json_int_t)s->n);
}

static int write_json(const char *path, const struct cal_opts *o, const struct pi_model *m, const struct cal_layer *L,
                      const struct cal_rec *rec, const struct cal_rec *ev, uint32_t down_type, bool down_exact,
                      double seconds)
{
    json_t *layers = json_array();
    for (int32_t l = 0; layers && l < m->hp.n_layer; l++) {
        const struct cal_layer *x = &L[l];
        json_t *j = stats_json(&x->held);
        if (!j)
            break;
        json_object_set_new(j, "layer", json_integer(l));
        json_object_set_new(j, "rank", json_integer(x->pred.rank));
        json_object_set_new(j, "layer_threshold", json_real(x->layer_thr));
        json_object_set_new(j, "predictor_bytes", json_integer((json_int_t)pred_bytes(&x->pred, o->f32_pred)));
        json_object_set_new(j, "eval", x->has_eval ? stats_json(&x->eval) : json_null());
        json_array_append_new(layers, j);
    }
    json_t *root = json_pack("{s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:s, s:b, s:s, s:f, s:o}", "model", o->model,
                             "output", o->out, "tokens_train", rec->n_train, "tokens_heldout",
                             rec->n_rows - rec->n_train, "tokens_eval", ev ? ev->n_rows : 0, "recall_target",
                             (double)o->recall, "threshold", (double)CAL_GLOBAL_THRESHOLD, "ffn_down_t_type",
                             quant_traits(down_type)->name, "ffn_down_t_exact", down_exact, "predictor_type",
                             o->f32_pred ? "f32" : "f16", "seconds", seconds, "layers", layers);
    if (!root)
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory for --json-stats");
    int rc = json_dump_file(root, path, JSON_INDENT(1)) ? pi_fail(PI_E_IO, "calibrate: cannot write '%s'", path) : 0;
    json_decref(root);
    return rc;
}

/* "a.txt, b.txt": the data files' base names, for pinfer.calibration.data. */
static char *data_names(const char **paths, int n)
{
    size_t len = 1;
    for (int i = 0; i < n; i++)
        len += strlen(paths[i]) + 2;
    char *s = malloc(len), *p = s;
    if (!s)
        return NULL;
    *p = '\0';
    for (int i = 0; i < n; i++) {
        const char *b = strrchr(paths[i], '/');
        p += sprintf(p, "%s%s", i ? ", " : "", b ? b + 1 : paths[i]);
    }
    return s;
}

/* Record the --eval texts: as many chunks as they hold, at most o->eval_tokens tokens. */
static int record_eval(struct cal_rec *ev, const struct pi_model *m, const struct cal_opts *o, int32_t chunk,
                       struct cal_progress *prog)
{
    int32_t *toks = NULL;
    size_t n = 0;
    int rc = tokenize_files(m->tok, o->eval, o->n_eval, &toks, &n);
    if (rc)
        return rc;
    const int32_t per_chunk = chunk - (tok_add_bos(m->tok) && tok_bos(m->tok) >= 0 ? 1 : 0);
    int64_t rows = (int64_t)(n / (size_t)per_chunk) * chunk;
    if (rows > o->eval_tokens)
        rows = o->eval_tokens;
    if (rows <= 0) {
        free(toks);
        return pi_fail(PI_E_RANGE, "calibrate: the --eval text has %zu tokens, fewer than one chunk of %d", n, chunk);
    }
    if ((rc = cal_rec_init(ev, m->hp.n_layer, m->hp.n_embd, m->hp.n_ff, 0, (int32_t)rows)) == 0) {
        prog_begin(prog, "recording %d eval tokens", (int32_t)rows);
        rc = cal_record(ev, m, toks, n, chunk, o->n_threads, prog);
        prog_end(prog, rc ? NULL : "recorded %d eval tokens", (int32_t)rows);
    }
    free(toks);
    return rc;
}

int cal_run(const struct cal_opts *o)
{
    struct pi_model *m = NULL;
    int32_t *toks = NULL;
    size_t n_toks = 0;
    struct cal_rec rec = { 0 }, ev = { 0 };
    struct cal_layer *L = NULL;
    struct pwri_layer *PL = NULL;
    struct cal_layer_report *R = NULL;
    float *layer_recall = NULL;
    char *names = NULL;
    struct cal_progress prog;
    struct cal_gemm g;
    int rc;
    const double t0 = pi_now_ms();

    prog_init(&prog, o->quiet);
    if (!o->model || !o->out || o->n_data < 1)
        return pi_fail(PI_E_INVAL, "calibrate: need MODEL.gguf, --data TEXT and -o OUT.powerinfer.gguf");
    if (!(o->recall > 0.0f && o->recall < 1.0f) || o->tokens < 1 || o->heldout < 1 || o->rank < 0 || o->chunk < 2 ||
        o->epochs < 0)
        return pi_fail(PI_E_INVAL, "calibrate: bad option values (recall in (0, 1), tokens and heldout >= 1)");
    /* every output against every input, before any work (an hour of calibration, then a lost model) */
    const char *outs[] = { o->out, o->report_svg, o->json_stats };
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
        if ((rc = gguf_check_not_input(outs[k], o->model, "the model")))
            return rc;
        for (int i = 0; i < o->n_data; i++)
            if ((rc = gguf_check_not_input(outs[k], o->data[i], "the --data file")))
                return rc;
        for (int i = 0; i < o->n_eval; i++)
            if ((rc = gguf_check_not_input(outs[k], o->eval[i], "the --eval file")))
                return rc;
    }
    quant_init();
    cal_gemm_blas(&g, o->n_threads);
    if ((rc = model_load(&m, o->model)) || (rc = check_model(m, o)))
        goto out;
    const struct pi_hparams *hp = &m->hp;
    const int32_t chunk = o->chunk < hp->n_ctx_train ? o->chunk : hp->n_ctx_train;
    if ((rc = tokenize_files(m->tok, o->data, o->n_data, &toks, &n_toks)))
        goto out;

    /* 1. record */
    if (!o->quiet)
        fprintf(stderr, "calibrate: %s: %d layers, n_embd %d, n_ff %d, %s; %zu data tokens; recording %d + %d held-out "
                "tokens (%.1f MiB)\n", o->model, hp->n_layer, hp->n_embd, hp->n_ff, model_act_name(hp->act), n_toks,
                o->tokens, o->heldout,
                (double)cal_rec_bytes(hp->n_layer, hp->n_embd, hp->n_ff, o->tokens + o->heldout) / (1 << 20));
    if ((rc = cal_rec_init(&rec, hp->n_layer, hp->n_embd, hp->n_ff, o->tokens, o->heldout)))
        goto out;
    prog_begin(&prog, "recording %d tokens", rec.n_rows);
    rc = cal_record(&rec, m, toks, n_toks, chunk, o->n_threads, &prog);
    prog_end(&prog, rc ? NULL : "recorded %d tokens", rec.n_rows);
    if (rc)
        goto out;
    if (o->n_eval > 0 && (rc = record_eval(&ev, m, o, chunk, &prog)))
        goto out;

    /* 2. train, choose the threshold, fold it */
    L = calloc((size_t)hp->n_layer, sizeof *L);
    PL = calloc((size_t)hp->n_layer, sizeof *PL);
    R = calloc((size_t)hp->n_layer, sizeof *R);
    layer_recall = calloc((size_t)hp->n_layer, sizeof *layer_recall);
    if (!L || !PL || !R || !layer_recall) {
        rc = pi_fail(PI_E_NOMEM, "calibrate: out of memory");
        goto out;
    }
    struct cal_train_params tp;
    cal_train_defaults(&tp);
    tp.seed = o->seed;
    tp.select_recall = fit_recall(o);
    if (o->epochs > 0)
        tp.epochs = o->epochs;
    if (o->batch > 0)
        tp.batch = o->batch;
    if (o->lr > 0.0f)
        tp.lr = o->lr;
    for (int l = 0; l < hp->n_layer; l++) {
        float *gate = NULL;
        if ((rc = layer_gate(m, l, &gate)))
            goto out;
        rc = fit_layer(&g, &rec, l, gate, o, &tp, &L[l], &prog);
        free(gate);
        if (rc || (rc = fold_layer(&g, &rec, o->n_eval > 0 ? &ev : NULL, l, o, &L[l])))
            goto out;
        L[l].act_freq = malloc((size_t)hp->n_ff * sizeof(float));
        if (!L[l].act_freq) {
            rc = pi_fail(PI_E_NOMEM, "calibrate: out of memory");
            goto out;
        }
        for (int32_t j = 0; j < hp->n_ff; j++)
            L[l].act_freq[j] = (float)((double)rec.count[l][j] / (double)rec.n_rows);
        layer_recall[l] = (float)cal_recall(&L[l].held);
        if (!o->quiet)
            fprintf(stderr, "calibrate: layer %d: rank %d, held-out recall %.4f, predicted active %.3f (true %.3f)\n",
                    l, L[l].pred.rank, cal_recall(&L[l].held), cal_pred_frac(&L[l].held), cal_true_frac(&L[l].held));
    }

    /* 3. write */
    uint32_t down_type;
    bool down_exact;
    if ((rc = pwri_down_t_type(m->layers[0].ffn_down.type, hp->n_embd, &down_type, &down_exact)))
        goto out;
    names = data_names(o->data, o->n_data);
    for (int l = 0; l < hp->n_layer; l++)
        PL[l] = (struct pwri_layer){ .pred = &L[l].pred, .act_freq = L[l].act_freq };
    struct pwri_params pp = {
        .pred_type = o->f32_pred ? PI_TYPE_F32 : PI_TYPE_F16,
        .threshold = CAL_GLOBAL_THRESHOLD,
        .tokens_train = (uint32_t)rec.n_train,
        .tokens_heldout = (uint32_t)(rec.n_rows - rec.n_train),
        .data_names = names,
        .recall_target = o->recall,
        .layer_recall = layer_recall,
    };
    prog_begin(&prog, "writing %s", o->out);
    rc = pwri_write(o->out, m->gguf, hp->n_layer, hp->n_embd, hp->n_ff, PL, &pp, &prog);
    prog_end(&prog, rc ? NULL : "wrote %s (ffn_down_t %s%s)", o->out, quant_traits(down_type)->name,
             down_exact ? ", exact transpose" : ", dequantized, transposed and requantized");
    if (rc)
        goto out;

    /* 4. report */
    const double secs = (pi_now_ms() - t0) / 1e3;
    if (!o->quiet) {
        print_table(stdout, L, hp->n_layer, o);
        printf("threshold %.1f (per-layer thresholds folded into the weights), ffn_down_t %s%s, %.1f s\n",
               (double)CAL_GLOBAL_THRESHOLD, quant_traits(down_type)->name,
               down_exact ? " (exact transpose)" : " (requantized after transposing: not bit-exact)", secs);
    }
    if (o->json_stats && (rc = write_json(o->json_stats, o, m, L, &rec, o->n_eval > 0 ? &ev : NULL, down_type,
                                          down_exact, secs)))
        goto out;
    if (o->report_svg) {
        for (int l = 0; l < hp->n_layer; l++)
            R[l] = (struct cal_layer_report){
                .rank = L[l].pred.rank,
                .recall = cal_recall(&L[l].held),
                .precision = cal_precision(&L[l].held),
                .pred_frac = cal_pred_frac(&L[l].held),
                .true_frac = cal_true_frac(&L[l].held),
                .eval_recall = L[l].has_eval ? cal_recall(&L[l].eval) : -1.0,
                .eval_pred_frac = L[l].has_eval ? cal_pred_frac(&L[l].eval) : -1.0,
                .eval_true_frac = L[l].has_eval ? cal_true_frac(&L[l].eval) : -1.0,
                .layer_thr = L[l].layer_thr,
                .pred_bytes = pred_bytes(&L[l].pred, o->f32_pred),
                .act_freq = L[l].act_freq,
            };
        if ((rc = cal_report_svg(o->report_svg, m->name ? m->name : o->model, hp->n_layer, hp->n_ff, R,
                                 o->recall)))
            goto out;
    }
out:
    if (L)
        for (int l = 0; m && l < m->hp.n_layer; l++) {
            cal_pred_fini(&L[l].pred);
            free(L[l].act_freq);
        }
    free(L);
    free(PL);
    free(R);
    free(layer_recall);
    free(names);
    cal_rec_fini(&rec);
    cal_rec_fini(&ev);
    free(toks);
    model_free(m);
    return rc;
}
