/* pictl synth — write a synthetic full-size llama/ReGLU model with controlled sparsity (synth.h),
 * or measure one (--measure: JSON on stdout). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"
#include "pictl.h"
#include "quant.h"
#include "quantize.h"
#include "synth.h"

#define SYNTH_MEASURE_TOKENS 256
#define SYNTH_MEASURE_SEED 7

static void synth_usage(FILE *f)
{
    fprintf(f,
            "usage: pictl synth --shape llama-7b|llama-13b|tiny|E,F,L,H,HKV -o OUT.gguf [options]\n"
            "       pictl synth --measure MODEL [--predictor PWRI] [--tokens N] [-t T]\n"
            "  --type T                   weight type (f16 default, f32, q8_0, q4_0, q4_k...), or a quantize\n"
            "                             mixture (q4_k_m, q5_k_m, q6_k...): its per-tensor types, directly\n"
            "  --sparsity S               fraction of FFN neurons inactive per token (default 0.9)\n"
            "  --zipf X                   exponent of the per-neuron firing law p ∝ rank^-X (default %.2f)\n"
            "  --hot-share H              instead of --zipf: the hottest 30%% of neurons carry H of activations\n"
            "  --vocab N                  vocabulary size (default per shape: 32000, tiny 1024)\n"
            "  --rank R                   predictor rank (default 1024, tiny 128); token subspace (R-1)/2 dims\n"
            "  --pwri                     PowerInfer file: ffn_down_t + exact predictors fc1/fc2\n"
            "  --pred-type f32|f16|q8_0|q4_0  predictor weight type (default f16, as PowerInfer)\n"
            "  --seed S                   (default 1); dense and --pwri files of one seed share their weights\n"
            "  -t, --threads N            generation threads (default: online cores)\n"
            "  -q, --quiet\n"
            "--measure runs N random tokens (default %d) through MODEL's dense forward pass and prints the\n"
            "active fraction per layer, the hottest 30%%'s share and, with --predictor (the --pwri twin of\n"
            "MODEL), the predictor's recall, the predicted fraction and the bytes per decode step.\n",
            SYNTH_DEFAULT_ZIPF, SYNTH_MEASURE_TOKENS);
}

static int synth_num(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0.0;
    if (!s || errno || *end || end == s || !(v >= lo && v <= hi))
        return pi_fail(PI_E_INVAL, "%s expects a number in [%g, %g], got '%s'", flag, lo, hi, s ? s : "(missing)");
    *out = v;
    return 0;
}

static int synth_type(const char *flag, const char *s, uint32_t *out)
{
    int t = quant_type_from_name(s);
    if (t != PI_TYPE_F32 && t != PI_TYPE_F16 && t != PI_TYPE_Q8_0 && t != PI_TYPE_Q4_0)
        return pi_fail(PI_E_INVAL, "%s %s: expected f32, f16, q8_0 or q4_0", flag, s);
    *out = (uint32_t)t;
    return 0;
}

/* --type: a type (any with a quantizer) or a quantize mixture ("q4_k_m": the types pictl quantize
 * would pick, written directly) */
static int synth_weight_type(const char *s, struct synth_opts *o)
{
    const struct qz_mixture *mix = s ? qz_mixture_find(s) : NULL;
    const int t = s ? quant_type_from_name(s) : -1;
    const struct pi_type_traits *tt = t >= 0 ? quant_traits((uint32_t)t) : NULL;
    if (tt && tt->from_float && tt->to_float && t != PI_TYPE_Q8_K) {
        o->type = (uint32_t)t, o->mix = NULL;
        return 0;
    }
    if (mix) {
        o->type = mix->type, o->mix = mix->name;
        return 0;
    }
    return pi_fail(PI_E_INVAL, "--type %s: expected a weight type (f32, f16, q8_0, q4_0, q4_k...) or a mixture "
                   "(q4_k_m, q5_k_m...)", s ? s : "(missing)");
}

static void synth_print_stats(const char *model, const struct synth_stats *st)
{
    double mean = 0.0, hot = 0.0;
    printf("{\"model\":\"%s\",\"n_tokens\":%lld,\"n_ff\":%d,\"active_frac\":[", model, (long long)st->n_tokens,
           st->n_ff);
    for (int32_t l = 0; l < st->n_layer; l++) {
        printf("%s%.4f", l ? "," : "", st->active_frac[l]);
        mean += st->active_frac[l] / st->n_layer;
        hot += st->hot_share[l] / st->n_layer;
    }
    printf("],\"active_frac_mean\":%.4f,\"hot_share\":[", mean);
    for (int32_t l = 0; l < st->n_layer; l++)
        printf("%s%.4f", l ? "," : "", st->hot_share[l]);
    printf("],\"hot_share_mean\":%.4f,\"dense_bytes\":%.0f,\"ffn_bytes\":%.0f", hot, st->dense_bytes,
           st->ffn_bytes);
    if (st->recall >= 0)
        printf(",\"recall\":%.4f,\"predicted_frac\":%.4f,\"sparse_bytes\":%.0f,\"pred_bytes\":%.0f", st->recall,
               st->predicted_frac, st->sparse_bytes, st->pred_bytes);
    printf("}\n");
}

int cmd_synth(int argc, char **argv)
{
    struct synth_opts o;
    synth_opts_default(&o);
    const char *shape = "llama-7b", *measure = NULL, *predictor = NULL;
    double vocab = 0, rank = 0, tokens = SYNTH_MEASURE_TOKENS, threads = 0, num;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            synth_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--pwri")) {
            o.pwri = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o.quiet = true;
        } else if (!v) {
            rc = pi_fail(PI_E_INVAL, "%s needs a value", a);
        } else {
            i++;
            if (!strcmp(a, "--shape")) shape = v;
            else if (!strcmp(a, "-o")) o.out_path = v;
            else if (!strcmp(a, "--measure")) measure = v;
            else if (!strcmp(a, "--predictor")) predictor = v;
            else if (!strcmp(a, "--type")) rc = synth_weight_type(v, &o);
            else if (!strcmp(a, "--pred-type")) rc = synth_type(a, v, &o.pred_type);
            else if (!strcmp(a, "--sparsity")) rc = synth_num(a, v, 0, 1, &o.sparsity);
            else if (!strcmp(a, "--zipf")) rc = synth_num(a, v, 0, 20, &o.zipf);
            else if (!strcmp(a, "--hot-share")) rc = synth_num(a, v, 0, 1, &o.hot_share);
            else if (!strcmp(a, "--vocab")) rc = synth_num(a, v, 1, 1 << 24, &vocab);
            else if (!strcmp(a, "--rank")) rc = synth_num(a, v, 1, 1 << 16, &rank);
            else if (!strcmp(a, "--tokens")) rc = synth_num(a, v, 1, 1 << 20, &tokens);
            else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) rc = synth_num(a, v, 1, 1024, &threads);
            else if (!strcmp(a, "--seed")) {
                if (!(rc = synth_num(a, v, 0, 9007199254740992.0, &num))) o.seed = (uint64_t)num;
            } else rc = pi_fail(PI_E_INVAL, "unknown option %s", a);
        }
    }
    if (!rc && threads > 0)
        o.n_threads = (int)threads;
    if (!rc && measure) {
        struct synth_stats st;
        if ((rc = synth_measure(measure, predictor, (int32_t)tokens, SYNTH_MEASURE_SEED, o.n_threads, &st)))
            return pictl_error("synth", measure, rc);
        synth_print_stats(measure, &st);
        synth_stats_fini(&st);
        return 0;
    }
    if (!rc && (rc = synth_shape_parse(&o.shape, shape)) == 0) {
        if (vocab > 0) o.shape.n_vocab = (int32_t)vocab;
        if (rank > 0) o.shape.rank = (int32_t)rank;
        if (!o.out_path) rc = pi_fail(PI_E_INVAL, "need -o OUT.gguf");
    }
    if (!rc)
        rc = synth_write(&o);
    if (rc) {
        pictl_error("synth", o.out_path ? o.out_path : "options", rc);
        if (rc == -PI_E_INVAL)
            synth_usage(stderr);
        return rc == -PI_E_INVAL ? 2 : 1;
    }
    return 0;
}
