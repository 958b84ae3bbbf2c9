/* run_opts.c — one table of flags for the generation commands. */
#include "run_opts.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pi_err.h"

#ifndef PI_DEFAULT_MODEL
#define PI_DEFAULT_MODEL "models/tiny-relu-llama-f16.gguf"
#endif
#define DEFAULT_N_PREDICT 128

enum {
    OPT_TEMP = 1000, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT_PENALTY, OPT_REPEAT_LAST_N, OPT_SEED,
    OPT_DUMP_LOGITS, OPT_JSON_STATS, OPT_IGNORE_EOS, OPT_INPROC, OPT_DENSE, OPT_VRAM, OPT_RESET_IDX,
    OPT_DISABLE_IDX, OPT_AUDIT,
};

static const struct option long_opts[] = {
    { "model", required_argument, NULL, 'm' },
    { "prompt", required_argument, NULL, 'p' },
    { "file", required_argument, NULL, 'f' },
    { "n-predict", required_argument, NULL, 'n' },
    { "threads", required_argument, NULL, 't' },
    { "ctx-size", required_argument, NULL, 'c' },
    { "batch-size", required_argument, NULL, 'b' },
    { "temp", required_argument, NULL, OPT_TEMP },
    { "top-k", required_argument, NULL, OPT_TOP_K },
    { "top-p", required_argument, NULL, OPT_TOP_P },
    { "min-p", required_argument, NULL, OPT_MIN_P },
    { "repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY },
    { "repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N },
    { "seed", required_argument, NULL, OPT_SEED },
    { "dump-logits", required_argument, NULL, OPT_DUMP_LOGITS },
    { "json-stats", required_argument, NULL, OPT_JSON_STATS },
    { "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS },
    { "inproc", no_argument, NULL, OPT_INPROC },
    { "dense", no_argument, NULL, OPT_DENSE },
    { "vram-budget", required_argument, NULL, OPT_VRAM },
    { "reset-gpu-index", no_argument, NULL, OPT_RESET_IDX },
    { "disable-gpu-index", no_argument, NULL, OPT_DISABLE_IDX },
    { "audit-rate", required_argument, NULL, OPT_AUDIT },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

static const char *const cmd_names[] = { "run", "tokenize", "perplexity" };

static void usage(enum run_opts_cmd cmd)
{
    printf("usage: pictl %s [options]\n"
           "  -m, --model FILE         GGUF model (default %s)\n",
           cmd_names[cmd], PI_DEFAULT_MODEL);
    if (cmd != RUN_OPTS_PERPLEXITY)
        printf("  -p, --prompt TEXT        prompt text\n"
               "  -f, --file FILE          read the prompt from a file\n");
    else
        printf("  -f, --file FILE          text to score\n");
    if (cmd == RUN_OPTS_TOKENIZE)
        return;
    printf("  -t, --threads N          CPU threads (default: online cores)\n"
           "  -c, --ctx-size N         context length (default: run 2048 or the model's; perplexity 512)\n"
           "  -b, --batch-size N       prompt tokens per evaluation (default 64)\n");
    if (cmd == RUN_OPTS_PERPLEXITY)
        return;
    printf("  -n, --n-predict N        tokens to generate (default %d, -1 = until end or context full)\n"
           "  --temp T                 temperature (default 0.8; 0 = greedy)\n"
           "  --top-k K                (default 40, 0 = off)\n"
           "  --top-p P                (default 0.95, 1 = off)\n"
           "  --min-p P                (default 0.05, 0 = off)\n"
           "  --repeat-penalty R       (default 1.0 = off)\n"
           "  --repeat-last-n N        window of the penalty (default 64)\n"
           "  --seed S                 sampling seed (default: random)\n"
           "  --ignore-eos             do not stop at end-of-generation tokens\n"
           "  --dump-logits FILE       raw little-endian float32, one n_vocab row per generated token\n"
           "  --json-stats FILE        timings and generated ids as JSON\n"
           "  --inproc                 run in this process instead of an ephemeral pipeline instance\n"
           "  --dense                  compute every FFN neuron even when the model has predictors\n"
           "  --vram-budget GIB        (pipeline) choose the hot neurons with the split solver\n"
           "  --reset-gpu-index / --disable-gpu-index   (pipeline) regenerate / no FFN split\n"
           "  --audit-rate P           (pipeline) fraction of tokens whose predictions are checked\n",
           DEFAULT_N_PREDICT);
}

static int parse_long(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "pictl: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        return -PI_E_INVAL;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *flag, const char *s, double lo, double hi, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "pictl: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -PI_E_INVAL;
    }
    *out = (float)v;
    return 0;
}

int read_text_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pi_fail(errno, "cannot open '%s'", path);
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return pi_fail(PI_E_NOMEM, "'%s' is too large", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return pi_fail(PI_E_IO, "cannot read '%s'", path);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int run_opts_parse(struct run_opts *o, int argc, char **argv, enum run_opts_cmd cmd)
{
    memset(o, 0, sizeof *o);
    o->model = getenv("PINFER_MODEL") ? getenv("PINFER_MODEL") : PI_DEFAULT_MODEL;
    o->n_ctx = cmd == RUN_OPTS_PERPLEXITY ? 512 : 2048;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = ncpu > 0 ? (int32_t)ncpu : 1;
    o->gen.n_predict = DEFAULT_N_PREDICT;
    o->vram_budget_gib = -1.0;
    samp_defaults(&o->gen.samp);
    const char *prompt = NULL;
    long v;
    int c, rc = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:n:t:c:b:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': o->file = optarg; break;
        case 'n': if (!(rc = parse_long("-n", optarg, -1, 1L << 30, &v))) o->gen.n_predict = (int32_t)v; break;
        case 't': if (!(rc = parse_long("-t", optarg, 1, 1024, &v))) o->n_threads = (int32_t)v; break;
        case 'c': if (!(rc = parse_long("-c", optarg, 8, 1L << 24, &v))) o->n_ctx = (int32_t)v; break;
        case 'b': if (!(rc = parse_long("-b", optarg, 1, 1L << 16, &v))) o->n_batch = (int32_t)v; break;
        case OPT_TEMP: rc = parse_float("--temp", optarg, 0, 100, &o->gen.samp.temp); break;
        case OPT_TOP_K: if (!(rc = parse_long("--top-k", optarg, 0, 1L << 30, &v))) o->gen.samp.top_k = (int32_t)v; break;
        case OPT_TOP_P: rc = parse_float("--top-p", optarg, 0, 1, &o->gen.samp.top_p); break;
        case OPT_MIN_P: rc = parse_float("--min-p", optarg, 0, 1, &o->gen.samp.min_p); break;
        case OPT_REPEAT_PENALTY: rc = parse_float("--repeat-penalty", optarg, 0.01, 100, &o->gen.samp.repeat_penalty); break;
        case OPT_REPEAT_LAST_N: if (!(rc = parse_long("--repeat-last-n", optarg, 0, 1L << 24, &v))) o->gen.samp.repeat_last_n = (int32_t)v; break;
        case OPT_SEED: {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(optarg, &end, 10);
            if (errno || *end || end == optarg) {
                fprintf(stderr, "pictl: --seed expects a non-negative integer, got '%s'\n", optarg);
                rc = -PI_E_INVAL;
            }
            o->gen.samp.seed = s;
            o->seed_given = true;
            break;
        }
        case OPT_DUMP_LOGITS: o->dump_logits = optarg; break;
        case OPT_JSON_STATS: o->json_stats = optarg; break;
        case OPT_IGNORE_EOS: o->gen.ignore_eos = true; break;
        case OPT_INPROC: o->inproc = true; break;
        case OPT_DENSE: o->dense = true; break;
        case OPT_VRAM: {
            float gib;
            if (!(rc = parse_float("--vram-budget", optarg, 0, 1e6, &gib)))
                o->vram_budget_gib = gib;
            break;
        }
        case OPT_RESET_IDX: o->reset_gpu_index = true; break;
        case OPT_DISABLE_IDX: o->disable_gpu_index = true; break;
        case OPT_AUDIT: rc = parse_float("--audit-rate", optarg, 0, 1, &o->audit_rate); break;
        case 'h': usage(cmd); return 1;
        default: fprintf(stderr, "pictl %s: see --help\n", cmd_names[cmd]); return -PI_E_INVAL;
        }
        if (rc)
            return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "pictl %s: unexpected argument '%s'\n", cmd_names[cmd], argv[optind]);
        return -PI_E_INVAL;
    }
    if (!o->seed_given) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o->gen.samp.seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    if (cmd == RUN_OPTS_PERPLEXITY) {
        if (!o->file) {
            fprintf(stderr, "pictl perplexity: -f TEXTFILE is required\n");
            return -PI_E_INVAL;
        }
        return 0;
    }
    if (prompt && o->file) {
        fprintf(stderr, "pictl %s: give -p or -f, not both\n", cmd_names[cmd]);
        return -PI_E_INVAL;
    }
    if (o->file) {
        size_t len;
        if ((rc = read_text_file(o->file, &o->prompt, &len))) {
            fprintf(stderr, "pictl %s: %s\n", cmd_names[cmd], pi_errmsg());
            return rc;
        }
    } else if (prompt) {
        o->prompt = strdup(prompt);
    } else {
        fprintf(stderr, "pictl %s: a prompt is required (-p TEXT or -f FILE)\n", cmd_names[cmd]);
        return -PI_E_INVAL;
    }
    return 0;
}

void run_opts_fini(struct run_opts *o)
{
    free(o->prompt);
    o->prompt = NULL;
}
