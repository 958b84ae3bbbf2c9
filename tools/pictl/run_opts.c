/* run_opts.c — one table of flags for the generation commands. */
#include "run_opts.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"  /* enum be_cache_type */
#include "gguf.h"     /* gguf_check_not_input */
#include "model.h"    /* enum model_weights */
#include "instance.h" /* INST_DEFAULT_NAME */
#include "pi_err.h"

/* The default model: the embedded one, as installed (meson install puts it under datadir) or in the
 * source tree. tools/meson.build defines the three paths. */
#ifndef PI_SOURCE_MODEL
#define PI_SOURCE_MODEL "models/tiny-relu-llama-f16.gguf"
#endif
#ifndef PI_INSTALLED_MODEL
#define PI_INSTALLED_MODEL "/usr/local/share/pinfer/models/tiny-relu-llama-f16.gguf"
#endif
#ifndef PI_INSTALLED_MODEL_REL /* relative to the directory of the installed pictl (bindir) */
#define PI_INSTALLED_MODEL_REL "../share/pinfer/models/tiny-relu-llama-f16.gguf"
#endif
#define DEFAULT_N_PREDICT 128
#define PI_XSTR(x) #x
#define PI_STR(x) PI_XSTR(x)

enum {
    OPT_TEMP = 1000, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT_PENALTY, OPT_REPEAT_LAST_N, OPT_SEED,
    OPT_DUMP_LOGITS, OPT_JSON_STATS, OPT_IGNORE_EOS, OPT_INPROC, OPT_DENSE, OPT_VRAM, OPT_RESET_IDX,
    OPT_DISABLE_IDX, OPT_AUDIT, OPT_PREDICT_IN, OPT_CACHE_TYPE, OPT_BACKEND, OPT_RAM, OPT_BUNDLE, OPT_STREAM_QD, OPT_DISK_FLOOR, OPT_NGL,
    OPT_MMAP, OPT_NO_MMAP,
};

/* Which commands a flag applies to (bit per enum run_opts_cmd). */
#define F_RUN (1u << RUN_OPTS_RUN)
#define F_TOK (1u << RUN_OPTS_TOKENIZE)
#define F_PPL (1u << RUN_OPTS_PERPLEXITY)
#define F_GEN (1u << RUN_OPTS_GENERATE)
#define F_ALL (F_RUN | F_TOK | F_PPL | F_GEN)
#define F_SAMPLE (F_RUN | F_GEN) /* a request's flags: its sampler, its length, its outputs */

/* One table drives getopt, the refusal of flags that do not apply, and --help. */
struct run_flag {
    struct option opt;
    unsigned cmds;
    const char *arg, *help;
};

static const struct run_flag flags[] = {
    { { "model", required_argument, NULL, 'm' }, F_RUN | F_TOK | F_PPL, "FILE", "GGUF model (default below)" },
    { { "prompt", required_argument, NULL, 'p' }, F_RUN | F_TOK | F_GEN, "TEXT", "prompt text (UTF-8)" },
    { { "file", required_argument, NULL, 'f' }, F_ALL, "FILE", "read the prompt (perplexity: the text to score) from FILE" },
    { { "n-predict", required_argument, NULL, 'n' }, F_SAMPLE, "N",
      "tokens to generate (default " PI_STR(DEFAULT_N_PREDICT) ", -1 = until end or context full)" },
    { { "threads", required_argument, NULL, 't' }, F_RUN | F_PPL, "N", "CPU threads (default: online cores)" },
    { { "ctx-size", required_argument, NULL, 'c' }, F_RUN | F_PPL, "N",
      "context length (default: run 2048, perplexity 512; 0 = the model's trained context)" },
    { { "batch-size", required_argument, NULL, 'b' }, F_RUN | F_PPL, "N", "prompt tokens per evaluation (default 64)" },
    { { "cache-type", required_argument, NULL, OPT_CACHE_TYPE }, F_RUN | F_PPL, "f32|f16",
      "KV cache element type (default f32 on the CPU, f16 on a GPU)" },
    { { "backend", required_argument, NULL, OPT_BACKEND }, F_RUN | F_PPL, "cpu|cuda|auto",
      "compute device (default auto: cuda when a GPU is present)" },
    { { "temp", required_argument, NULL, OPT_TEMP }, F_SAMPLE, "T", "temperature (default 0.8; 0 = greedy)" },
    { { "top-k", required_argument, NULL, OPT_TOP_K }, F_SAMPLE, "K", "(default 40, 0 = off)" },
    { { "top-p", required_argument, NULL, OPT_TOP_P }, F_SAMPLE, "P", "(default 0.95, 1 = off)" },
    { { "min-p", required_argument, NULL, OPT_MIN_P }, F_SAMPLE, "P", "(default 0.05, 0 = off)" },
    { { "repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY }, F_SAMPLE, "R", "(default 1.0 = off)" },
    { { "repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N }, F_SAMPLE, "N", "window of the penalty (default 64)" },
    { { "seed", required_argument, NULL, OPT_SEED }, F_SAMPLE, "S",
      "sampling seed 0..2^64-1; -1 or none: drawn at random, printed on stderr" },
    { { "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS }, F_SAMPLE, NULL, "do not stop at end-of-generation tokens" },
    { { "dump-logits", required_argument, NULL, OPT_DUMP_LOGITS }, F_SAMPLE, "FILE",
      "raw little-endian float32, one n_vocab row per generated token" },
    { { "json-stats", required_argument, NULL, OPT_JSON_STATS }, F_SAMPLE, "FILE", "timings and generated ids as JSON" },
    { { "inproc", no_argument, NULL, OPT_INPROC }, F_RUN, NULL, "run in this process instead of an ephemeral pipeline instance" },
    { { "dense", no_argument, NULL, OPT_DENSE }, F_RUN | F_PPL | F_GEN, NULL,
      "compute every FFN neuron even when the model has predictors" },
    { { "vram-budget", required_argument, NULL, OPT_VRAM }, F_RUN, "GIB", "(pipeline) choose the hot neurons with the split solver" },
    { { "n-gpu-layers", required_argument, NULL, OPT_NGL }, F_RUN, "N",
      "(pipeline; also -ngl N) dense partial offload: the first N whole layers on the GPU, the rest on the CPU" },
    { { "reset-gpu-index", no_argument, NULL, OPT_RESET_IDX }, F_RUN, NULL, "(pipeline) regenerate the FFN split" },
    { { "disable-gpu-index", no_argument, NULL, OPT_DISABLE_IDX }, F_RUN, NULL, "(pipeline) no FFN split" },
    { { "audit-rate", required_argument, NULL, OPT_AUDIT }, F_RUN, "P", "(pipeline) fraction of tokens whose predictions are checked" },
    { { "predict-in", required_argument, NULL, OPT_PREDICT_IN }, F_RUN, "gpud|predictord",
      "(pipeline) where the CPU backend's masks are computed (default gpud)" },
    { { "ram-budget", required_argument, NULL, OPT_RAM }, F_RUN, "GIB",
      "(--inproc) host memory for weights + neuron cache: the hottest FFN neurons stay in RAM, the rest is read from the bundle" },
    { { "bundle", required_argument, NULL, OPT_BUNDLE }, F_RUN, "FILE", "(--ram-budget) the FFN bundle (default MODEL.ffnbundle; pictl bundle)" },
    { { "stream-qd", required_argument, NULL, OPT_STREAM_QD }, F_RUN, "N", "(--ram-budget) disk reads in flight (default 64; 1024 with async reads, the default from 8 cores)" },
    { { "disk-floor", no_argument, NULL, OPT_DISK_FLOOR }, F_RUN, NULL, "(--ram-budget) measure the random-read floor after the run" },
    { { "mmap", no_argument, NULL, OPT_MMAP }, F_RUN | F_PPL, NULL,
      "(in process) use the weights from the file's mapping (the default: 4 KiB pages, nothing read up front)" },
    { { "no-mmap", no_argument, NULL, OPT_NO_MMAP }, F_RUN | F_PPL, NULL,
      "(in process) read the weights into memory on 2 MiB huge pages (fewer TLB misses; the load zeroes and "
      "copies the whole file)" },
    { { "help", no_argument, NULL, 'h' }, F_ALL, NULL, "this text" },
};
#define N_FLAGS (sizeof flags / sizeof flags[0])

static const char *const cmd_names[] = { "run", "tokenize", "perplexity", "generate" };

/* Why a flag does not apply: generate's instance fixed it at start. */
static const char *not_applying_why(enum run_opts_cmd cmd, int val)
{
    if (cmd != RUN_OPTS_GENERATE)
        return "";
    switch (val) {
    case 'm': return ": the instance runs the model 'pictl start -m' loaded";
    case 't': case 'c': case 'b': return ": the instance's threads, context and batch are set by 'pictl start'";
    case OPT_INPROC: return ": generate asks a running instance ('pictl run --inproc' runs in this process)";
    default: return ": it is set by 'pictl start'";
    }
}

static const struct run_flag *flag_of(int val)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (flags[i].opt.val == val)
            return &flags[i];
    return NULL;
}

static void usage(enum run_opts_cmd cmd)
{
    static const char *const synopsis[] = {
        "run [-m MODEL] -p PROMPT [options]   a completion (an ephemeral pipeline instance, or --inproc)",
        "tokenize [-m MODEL] -p TEXT          print the token ids",
        "perplexity [-m MODEL] -f TEXTFILE [options]",
        "generate -p PROMPT [--name NAME] [options]   a completion from a running instance",
    };
    printf("usage: pictl %s\n", synopsis[cmd]);
    if (cmd == RUN_OPTS_GENERATE)
        printf("  %-24s %s\n", "--name NAME", "the instance (default: " INST_DEFAULT_NAME ")");
    for (size_t i = 0; i < N_FLAGS; i++) {
        const struct run_flag *f = &flags[i];
        if (!(f->cmds & (1u << cmd)))
            continue;
        char lhs[48];
        const char *arg = f->arg ? f->arg : "", *sp = f->arg ? " " : "";
        if (f->opt.val < 256)
            snprintf(lhs, sizeof lhs, "-%c, --%s%s%s", f->opt.val, f->opt.name, sp, arg);
        else
            snprintf(lhs, sizeof lhs, "--%s%s%s", f->opt.name, sp, arg);
        printf("  %-24s %s\n", lhs, f->help);
    }
    if (cmd != RUN_OPTS_GENERATE)
        printf("default model: $PINFER_MODEL, else %s\n", run_opts_default_model());
}

/* A pictl in a build tree (<builddir>/tools/pictl, next to <builddir>/build.ninja) runs the source
 * tree's model; an installed one the model installed beside it (found relative to its own path, so
 * that a relocated or DESTDIR install works), else the configured install path; the source tree's
 * when nothing is installed. */
const char *run_opts_default_model(void)
{
    static char found[PATH_MAX];
    char self[PATH_MAX], probe[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return access(PI_INSTALLED_MODEL, R_OK) == 0 ? PI_INSTALLED_MODEL : PI_SOURCE_MODEL;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(probe, sizeof probe, "%s/../build.ninja", self);
    if (access(probe, F_OK) == 0)
        return PI_SOURCE_MODEL;
    if (PI_INSTALLED_MODEL_REL[0] == '/') /* bindir or datadir configured absolute */
        snprintf(probe, sizeof probe, "%s", PI_INSTALLED_MODEL_REL);
    else
        snprintf(probe, sizeof probe, "%s/%s", self, PI_INSTALLED_MODEL_REL);
    if (access(probe, R_OK) == 0 && realpath(probe, found))
        return found;
    return access(PI_INSTALLED_MODEL, R_OK) == 0 ? PI_INSTALLED_MODEL : PI_SOURCE_MODEL;
}

static int parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "pictl %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, flag, lo, hi, s);
        return -PI_E_INVAL;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "pictl %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag, lo, hi, s);
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

static void draw_seed(struct run_opts *o, enum run_opts_cmd cmd)
{
    if (!o->seed_given) {
        /* drawn here, in the client, so that it travels with the request: the supervisor stores it
         * with the request and a replay after a stage restart draws the same tokens; printed so that
         * the user can repeat the run (only where a sampler uses it) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o->gen.samp.seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
        if ((cmd == RUN_OPTS_RUN || cmd == RUN_OPTS_GENERATE) && o->gen.samp.temp > 0.0f)
            fprintf(stderr, "[seed] %llu (random; --seed %llu repeats this run)\n", (unsigned long long)o->gen.samp.seed,
                    (unsigned long long)o->gen.samp.seed);
    }
}

void run_opts_ngl_alias(int argc, char **argv)
{
    /* llama.cpp's single-dash -ngl, which getopt would read as -n -g -l */
    static char ngl[] = "--n-gpu-layers";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "-ngl"))
            argv[i] = ngl;
    }
}

int run_opts_parse(struct run_opts *o, int argc, char **argv, enum run_opts_cmd cmd)
{
    memset(o, 0, sizeof *o);
    o->model = getenv("PINFER_MODEL") ? getenv("PINFER_MODEL") : run_opts_default_model();
    o->n_ctx = cmd == RUN_OPTS_PERPLEXITY ? 512 : 2048;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = ncpu > 0 ? (int32_t)ncpu : 1;
    o->gen.n_predict = DEFAULT_N_PREDICT;
    o->vram_budget_gib = -1.0;
    o->ram_budget_gib = -1.0;
    o->weights = -1;
    o->n_gpu_layers = -1;
    o->cache_type = -1;
    run_opts_ngl_alias(argc, argv);
    o->backend = "auto";
    samp_defaults(&o->gen.samp);
    const char *prompt = NULL, *name = cmd_names[cmd];
    struct option long_opts[N_FLAGS + 1];
    for (size_t i = 0; i < N_FLAGS; i++)
        long_opts[i] = flags[i].opt;
    long_opts[N_FLAGS] = (struct option){ NULL, 0, NULL, 0 };
    long v;
    int c, rc = 0;
    optind = 1;
    opterr = 0; /* getopt's messages would name argv[0] ("run"); ours name the command */
    while ((c = getopt_long(argc, argv, ":m:p:f:n:t:c:b:h", long_opts, NULL)) != -1) {
        const struct run_flag *fl = flag_of(c);
        if (fl && !(fl->cmds & (1u << cmd))) {
            char shown[40];
            if (c < 256)
                snprintf(shown, sizeof shown, "-%c/--%s", c, fl->opt.name);
            else
                snprintf(shown, sizeof shown, "--%s", fl->opt.name);
            fprintf(stderr, "pictl %s: %s does not apply to %s%s; see 'pictl %s --help'\n", name, shown, name,
                    not_applying_why(cmd, c), name);
            return -PI_E_INVAL;
        }
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': o->file = optarg; break;
        case 'n': if (!(rc = parse_long(name, "-n", optarg, -1, 1L << 30, &v))) o->gen.n_predict = (int32_t)v; break;
        case 't': if (!(rc = parse_long(name, "-t", optarg, 1, 1024, &v))) o->n_threads = (int32_t)v; break;
        case 'c': /* 0: the model's trained context, as llama.cpp's -c 0 */
            if (!strcmp(optarg, "0"))
                o->n_ctx = 0;
            else if (!(rc = parse_long(name, "-c (0: the model's context)", optarg, 8, 1L << 24, &v)))
                o->n_ctx = (int32_t)v, o->n_ctx_given = true;
            break;
        case 'b': if (!(rc = parse_long(name, "-b", optarg, 1, 1L << 16, &v))) o->n_batch = (int32_t)v; break;
        case OPT_TEMP: rc = parse_float(name, "--temp", optarg, 0, 100, &o->gen.samp.temp); break;
        case OPT_TOP_K: if (!(rc = parse_long(name, "--top-k", optarg, 0, 1L << 30, &v))) o->gen.samp.top_k = (int32_t)v; break;
        case OPT_TOP_P: rc = parse_float(name, "--top-p", optarg, 0, 1, &o->gen.samp.top_p); break;
        case OPT_MIN_P: rc = parse_float(name, "--min-p", optarg, 0, 1, &o->gen.samp.min_p); break;
        case OPT_REPEAT_PENALTY: rc = parse_float(name, "--repeat-penalty", optarg, 0.01, 100, &o->gen.samp.repeat_penalty); break;
        case OPT_REPEAT_LAST_N: if (!(rc = parse_long(name, "--repeat-last-n", optarg, 0, 1L << 24, &v))) o->gen.samp.repeat_last_n = (int32_t)v; break;
        case OPT_SEED: {
            /* -1 means "random", as in llama.cpp: drawn below like no --seed. strtoull would wrap any
             * other negative number to a huge seed, so a sign is refused. */
            if (!strcmp(optarg, "-1"))
                break;
            char *end;
            errno = 0;
            unsigned long long s = optarg[0] == '-' || optarg[0] == '+' ? 0 : strtoull(optarg, &end, 10);
            if (optarg[0] == '-' || optarg[0] == '+' || errno || *end || end == optarg) {
                fprintf(stderr, "pictl %s: --seed expects an integer in [0, 2^64-1], or -1 for a random seed; got '%s'\n",
                        name, optarg);
                rc = -PI_E_INVAL;
            } else {
                o->gen.samp.seed = s;
                o->seed_given = true;
            }
            break;
        }
        case OPT_DUMP_LOGITS: o->dump_logits = optarg; break;
        case OPT_JSON_STATS: o->json_stats = optarg; break;
        case OPT_IGNORE_EOS: o->gen.ignore_eos = true; break;
        case OPT_INPROC: o->inproc = true; break;
        case OPT_DENSE: o->dense = true; break;
        case OPT_BACKEND:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto")) {
                fprintf(stderr, "pictl %s: --backend expects cpu, cuda or auto, got '%s'\n", name, optarg);
                rc = -PI_E_INVAL;
            } else {
                o->backend = optarg;
            }
            break;
        case OPT_CACHE_TYPE:
            if (!strcmp(optarg, "f32") || !strcmp(optarg, "f16")) {
                o->cache_type = optarg[1] == '1' ? BE_CACHE_F16 : BE_CACHE_F32;
            } else {
                fprintf(stderr, "pictl %s: --cache-type expects f32 or f16, got '%s'\n", name, optarg);
                rc = -PI_E_INVAL;
            }
            break;
        case OPT_VRAM: {
            float gib;
            if (!(rc = parse_float(name, "--vram-budget", optarg, 0, 1e6, &gib)))
                o->vram_budget_gib = gib;
            break;
        }
        case OPT_RAM: {
            float gib;
            if (!(rc = parse_float(name, "--ram-budget", optarg, 0, 1e6, &gib)))
                o->ram_budget_gib = gib;
            break;
        }
        case OPT_BUNDLE: o->bundle = optarg; break;
        case OPT_STREAM_QD: {
            float qd;
            if (!(rc = parse_float(name, "--stream-qd", optarg, 1, 4096, &qd)))
                o->stream_qd = (int32_t)qd;
            break;
        }
        case OPT_DISK_FLOOR: o->disk_floor = true; break;
        case OPT_MMAP: case OPT_NO_MMAP: {
            const int32_t w = c == OPT_MMAP ? MODEL_WEIGHTS_MAP : MODEL_WEIGHTS_READ;
            if (o->weights >= 0 && o->weights != w) {
                fprintf(stderr, "pictl %s: give --mmap or --no-mmap, not both\n", name);
                rc = -PI_E_INVAL;
            }
            o->weights = w;
            break;
        }
        case OPT_NGL: if (!(rc = parse_long(name, "--n-gpu-layers", optarg, 0, 1L << 20, &v))) o->n_gpu_layers = (int32_t)v; break;
        case OPT_RESET_IDX: o->reset_gpu_index = true; break;
        case OPT_DISABLE_IDX: o->disable_gpu_index = true; break;
        case OPT_AUDIT: rc = parse_float(name, "--audit-rate", optarg, 0, 1, &o->audit_rate); break;
        case OPT_PREDICT_IN:
            if ((o->predict_in = predict_in_parse(optarg)) < 0) {
                fprintf(stderr, "pictl %s: --predict-in expects gpud or predictord, got '%s'\n", name, optarg);
                rc = -PI_E_INVAL;
            }
            break;
        case 'h': usage(cmd); return 1;
        case ':':
            fprintf(stderr, "pictl %s: %s needs a value; see 'pictl %s --help'\n", name, argv[optind - 1], name);
            return -PI_E_INVAL;
        default:
            fprintf(stderr, "pictl %s: unknown option '%s'; see 'pictl %s --help'\n", name, argv[optind - 1], name);
            return -PI_E_INVAL;
        }
        if (rc)
            return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "pictl %s: unexpected argument '%s'\n", cmd_names[cmd], argv[optind]);
        return -PI_E_INVAL;
    }
    if (cmd == RUN_OPTS_RUN && !o->inproc && o->weights >= 0) {
        fprintf(stderr, "pictl run: --%s applies in process (--inproc); the pipeline's weights live in loaderd's "
                "shared memory\n", o->weights == MODEL_WEIGHTS_MAP ? "mmap" : "no-mmap");
        return -PI_E_INVAL;
    }
    if (o->weights == MODEL_WEIGHTS_READ && o->ram_budget_gib >= 0) {
        fprintf(stderr, "pictl %s: --no-mmap reads the whole file into memory, --ram-budget streams the FFN from "
                "disk: give one\n", name);
        return -PI_E_INVAL;
    }
    /* an output file naming an input (directly or through a link) would replace it: refused before
     * anything is read or written */
    const char *outs[] = { o->dump_logits, o->json_stats };
    const struct { const char *path, *what; } ins[] = { { o->model, "the model" }, { o->file, "the -f file" },
                                                         { o->bundle, "the --bundle" } };
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++)
        for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++)
            if (gguf_check_not_input(outs[k], ins[i].path, ins[i].what)) {
                fprintf(stderr, "pictl %s: %s\n", name, pi_errmsg());
                return -PI_E_INVAL;
            }
    if (cmd == RUN_OPTS_PERPLEXITY) {
        if (!o->file) {
            fprintf(stderr, "pictl perplexity: -f TEXTFILE is required\n");
            return -PI_E_INVAL;
        }
        draw_seed(o, cmd);
        return 0;
    }
    if (prompt && o->file) {
        fprintf(stderr, "pictl %s: give -p or -f, not both\n", cmd_names[cmd]);
        return -PI_E_INVAL;
    }
    size_t len = 0;
    if (o->file) {
        if ((rc = read_text_file(o->file, &o->prompt, &len))) {
            fprintf(stderr, "pictl %s: %s\n", name, pi_errmsg());
            return rc;
        }
    } else if (prompt) {
        len = strlen(prompt);
        if (!(o->prompt = strdup(prompt))) {
            fprintf(stderr, "pictl %s: out of memory\n", name);
            return -PI_E_NOMEM;
        }
    } else {
        fprintf(stderr, "pictl %s: a prompt is required (-p TEXT or -f FILE)\n", name);
        return -PI_E_INVAL;
    }
    if ((rc = run_opts_check_utf8(o->prompt, len))) {
        fprintf(stderr, "pictl %s: %s: %s\n", name, o->file ? o->file : "-p", pi_errmsg());
        run_opts_fini(o);
        return rc;
    }
    draw_seed(o, cmd); /* last: its line is printed only for a command that will run */
    return 0;
}

int run_opts_check_utf8(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        const unsigned c = s[i];
        size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        uint32_t cp = n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
        bool ok = n > 0 && i + n <= len;
        for (size_t k = 1; ok && k < n; k++) {
            ok = (s[i + k] & 0xc0) == 0x80;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        /* overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8 either */
        if (ok && n > 1)
            ok = cp >= (n == 2 ? 0x80u : n == 3 ? 0x800u : 0x10000u) && !(cp >= 0xd800 && cp <= 0xdfff) && cp <= 0x10ffff;
        if (c == 0) /* -f text with a NUL: the prompt would end there */
            return pi_fail(PI_E_INVAL, "a NUL byte at offset %zu: the prompt must be text", i);
        if (!ok)
            return pi_fail(PI_E_INVAL, "byte 0x%02x at offset %zu is not UTF-8: the prompt must be UTF-8 text", c, i);
        i += n;
    }
    return 0;
}

void run_opts_note_backend(const char *who, const char *why)
{
    if (why && why[0] && be_find("cuda"))
        fprintf(stderr, "%s: running on the CPU: %s\n", who, why);
}

int run_opts_weights(const struct run_opts *o, const char **why)
{
    if (o->weights == MODEL_WEIGHTS_READ) {
        *why = "read into huge pages (--no-mmap)";
        return MODEL_WEIGHTS_READ;
    }
    *why = o->weights == MODEL_WEIGHTS_MAP ? "mapped (--mmap)" : "mapped";
    return MODEL_WEIGHTS_MAP;
}

void run_opts_fini(struct run_opts *o)
{
    free(o->prompt);
    o->prompt = NULL;
}

void run_opts_warn_ctx(const char *who, int32_t n_ctx, int32_t n_ctx_train)
{
    if (n_ctx_train > 0 && n_ctx > n_ctx_train)
        fprintf(stderr, "%s: warning: -c %d is beyond the model's trained context of %d tokens: text past it may "
                        "degrade (-c 0 uses %d)\n", who, n_ctx, n_ctx_train, n_ctx_train);
}
