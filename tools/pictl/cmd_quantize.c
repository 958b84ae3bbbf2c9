/* pictl quantize — re-write a GGUF / PowerInfer file in another type with llama-quantize's names,
 * mixtures and flags (tools/quantize/quantize.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "pi_err.h"
#include "pictl.h"
#include "quant.h"
#include "quantize.h"

static void quantize_usage(FILE *f)
{
    size_t n;
    const struct qz_mixture *mx = qz_mixtures(&n);
    fprintf(f,
            "usage: pictl quantize [options] IN.gguf OUT.gguf TYPE [N_THREADS]\n"
            "       pictl quantize --dry-run [options] IN.gguf TYPE\n"
            "  TYPE: a llama-quantize name (case-insensitive):");
    for (size_t i = 0; i < n; i++)
        fprintf(f, " %s", mx[i].name);
    fprintf(f, " (q3_k, q4_k, q5_k: the _m mixtures)\n"
            "  --pure                     every tensor the default type (no per-layer mixture; the\n"
            "                             fallback for row lengths off the block still applies)\n"
            "  --output-tensor-type T     output.weight as T (a ggml type name: q8_0, q6_k, f16...)\n"
            "  --token-embedding-type T   token_embd.weight as T\n"
            "  --leave-output-tensor      output.weight keeps its type\n"
            "  --allow-requantize         allow re-quantizing tensors that are already quantized\n"
            "  --keep-predictors          PowerInfer files: fc1/fc2 keep their type (default: Q5_0, or Q4_0\n"
            "                             for a Q4_0 file, as PowerInfer's quantize writes them)\n"
            "  --dry-run                  print the per-tensor plan and the output size, write nothing\n"
            "  -t, --threads N            threads (default: online cores; also the 4th positional)\n"
            "  -q, --quiet                no per-tensor lines\n");
}

/* a ggml type name, case-insensitive ("Q6_K", "q6_k", "f16") */
static int quantize_type_arg(const char *flag, const char *s, uint32_t *out)
{
    for (uint32_t t = 0; s && t < PI_TYPE_COUNT; t++) {
        const struct pi_type_traits *tr = quant_traits(t);
        if (tr && tr->from_float && t != PI_TYPE_Q8_K && strcasecmp(tr->name, s) == 0) {
            *out = t;
            return 0;
        }
    }
    return pi_fail(PI_E_INVAL, "%s: unknown tensor type '%s'", flag, s ? s : "(missing)");
}

static int quantize_threads(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || *end || end == s || v < 1 || v > 4096)
        return pi_fail(PI_E_INVAL, "threads: expected 1..4096, got '%s'", s ? s : "(missing)");
    *out = (int)v;
    return 0;
}

int cmd_quantize(int argc, char **argv)
{
    struct qz_opts o = { .params = { .output_type = QZ_TYPE_AUTO, .token_embd_type = QZ_TYPE_AUTO }, .log = stderr };
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.n_threads = ncpu > 0 ? (int)ncpu : 1;
    const char *pos[4];
    int npos = 0, rc;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            quantize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--pure")) {
            o.params.pure = true;
        } else if (!strcmp(a, "--leave-output-tensor")) {
            o.params.leave_output = true;
        } else if (!strcmp(a, "--allow-requantize")) {
            o.params.allow_requantize = true;
        } else if (!strcmp(a, "--keep-predictors")) {
            o.params.keep_predictors = true;
        } else if (!strcmp(a, "--dry-run")) {
            o.dry_run = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--output-tensor-type")) {
            if ((rc = quantize_type_arg(a, i + 1 < argc ? argv[++i] : NULL, &o.params.output_type)))
                return pictl_error("quantize", "arguments", rc);
        } else if (!strcmp(a, "--token-embedding-type")) {
            if ((rc = quantize_type_arg(a, i + 1 < argc ? argv[++i] : NULL, &o.params.token_embd_type)))
                return pictl_error("quantize", "arguments", rc);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if ((rc = quantize_threads(i + 1 < argc ? argv[++i] : NULL, &o.n_threads)))
                return pictl_error("quantize", "arguments", rc);
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "pictl quantize: unknown option '%s'\n", a);
            quantize_usage(stderr);
            return 2;
        } else if (npos < 4) {
            pos[npos++] = a;
        } else {
            quantize_usage(stderr);
            return 2;
        }
    }
    /* IN OUT TYPE [N] or, for a dry run, IN TYPE */
    const char *type_name = NULL;
    if (o.dry_run && npos == 2) {
        o.in = pos[0];
        type_name = pos[1];
    } else if (npos >= 3) {
        o.in = pos[0];
        o.out = pos[1];
        type_name = pos[2];
        if (npos == 4 && (rc = quantize_threads(pos[3], &o.n_threads)))
            return pictl_error("quantize", "arguments", rc);
    } else {
        quantize_usage(stderr);
        return 2;
    }
    if (!(o.params.mix = qz_mixture_find(type_name))) {
        fprintf(stderr, "pictl quantize: unknown TYPE '%s'\n", type_name);
        quantize_usage(stderr);
        return 2;
    }
    if (quiet)
        o.log = NULL;
    o.progress = o.log && isatty(fileno(o.log));
    if ((rc = qz_run(&o)))
        return pictl_error("quantize", o.in, rc);
    return 0;
}
