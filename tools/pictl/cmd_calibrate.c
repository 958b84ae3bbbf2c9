/* pictl calibrate — flags → struct cal_opts → cal_run (tools/calibrate). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate.h"
#include "pi_err.h"
#include "pictl.h"

#define CAL_MAX_FILES 64

enum {
    OPT_DATA = 1000, OPT_TOKENS, OPT_HELDOUT, OPT_RANK, OPT_RECALL, OPT_REPORT, OPT_JSON_STATS, OPT_EVAL,
    OPT_EVAL_TOKENS, OPT_EPOCHS, OPT_BATCH, OPT_LR, OPT_SEED, OPT_CHUNK, OPT_F32_PRED,
};

static const struct option cal_long_opts[] = {
    { "model", required_argument, NULL, 'm' },
    { "data", required_argument, NULL, OPT_DATA },
    { "output", required_argument, NULL, 'o' },
    { "tokens", required_argument, NULL, OPT_TOKENS },
    { "heldout", required_argument, NULL, OPT_HELDOUT },
    { "rank", required_argument, NULL, OPT_RANK },
    { "recall", required_argument, NULL, OPT_RECALL },
    { "threads", required_argument, NULL, 't' },
    { "report", required_argument, NULL, OPT_REPORT },
    { "json-stats", required_argument, NULL, OPT_JSON_STATS },
    { "eval", required_argument, NULL, OPT_EVAL },
    { "eval-tokens", required_argument, NULL, OPT_EVAL_TOKENS },
    { "epochs", required_argument, NULL, OPT_EPOCHS },
    { "batch", required_argument, NULL, OPT_BATCH },
    { "lr", required_argument, NULL, OPT_LR },
    { "seed", required_argument, NULL, OPT_SEED },
    { "chunk", required_argument, NULL, OPT_CHUNK },
    { "f32-predictor", no_argument, NULL, OPT_F32_PRED },
    { "quiet", no_argument, NULL, 'q' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

static void cal_usage(FILE *f)
{
    fprintf(f,
            "usage: pictl calibrate MODEL.gguf --data TEXT -o OUT.powerinfer.gguf [options]\n"
            "  profiles the FFN activations of a ReLU-family model on TEXT, trains one activation predictor\n"
            "  per layer and writes a PowerInfer-format GGUF (magic PWRI).\n"
            "  -m, --model FILE       the dense GGUF (or give it as the first argument)\n"
            "  --data FILE            calibration text (repeatable; chunks are taken evenly from all of it)\n"
            "  -o, --output FILE      the PowerInfer GGUF to write\n"
            "  --tokens N             training tokens (default 16384)\n"
            "  --heldout N            held-out tokens for the threshold and the figures (default 2048)\n"
            "  --rank R               predictor rank for every layer (default: chosen per layer, <= n_embd)\n"
            "  --recall R             target held-out recall per layer (default 0.99)\n"
            "  -t, --threads N        CPU threads (default: online cores)\n"
            "  --report FILE.svg      activation power law and recall per layer as an SVG\n"
            "  --json-stats FILE      per-layer figures as JSON\n"
            "  --eval FILE            text never used for fitting: recall is also measured on it (repeatable)\n"
            "  --eval-tokens N        most tokens taken from the --eval texts (default 4096)\n"
            "  --epochs N             training epochs (default 6)\n"
            "  --batch N              tokens per training step (default 128)\n"
            "  --lr X                 Adam step size (default 0.004)\n"
            "  --seed S               initialisation and shuffling seed\n"
            "  --chunk N              positions per evaluated chunk (default 256)\n"
            "  --f32-predictor        store fc1/fc2 as f32 (default f16)\n"
            "  -q, --quiet            no progress and no table\n");
}

static int cal_parse_long(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return pi_fail(PI_E_INVAL, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
    *out = v;
    return 0;
}

int cmd_calibrate(int argc, char **argv)
{
    struct cal_opts o;
    cal_opts_defaults(&o);
    const char *data[CAL_MAX_FILES], *eval[CAL_MAX_FILES];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN), v = 0;
    o.n_threads = ncpu > 0 ? (int32_t)ncpu : 1;
    o.data = data;
    o.eval = eval;
    int c, rc = 0;
    optind = 1;
    while (!rc && (c = getopt_long(argc, argv, "m:o:t:qh", cal_long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': o.model = optarg; break;
        case 'o': o.out = optarg; break;
        case OPT_DATA:
        case OPT_EVAL: {
            int *n = c == OPT_DATA ? &o.n_data : &o.n_eval;
            if (*n == CAL_MAX_FILES)
                rc = pi_fail(PI_E_INVAL, "at most %d --data / --eval files", CAL_MAX_FILES);
            else
                (c == OPT_DATA ? data : eval)[(*n)++] = optarg;
            break;
        }
        case OPT_TOKENS: rc = cal_parse_long("--tokens", optarg, 1, 1L << 24, &v); o.tokens = (int32_t)v; break;
        case OPT_HELDOUT: rc = cal_parse_long("--heldout", optarg, 1, 1L << 24, &v); o.heldout = (int32_t)v; break;
        case OPT_EVAL_TOKENS: rc = cal_parse_long("--eval-tokens", optarg, 1, 1L << 24, &v); o.eval_tokens = (int32_t)v; break;
        case OPT_RANK: rc = cal_parse_long("--rank", optarg, 1, 1L << 20, &v); o.rank = (int32_t)v; break;
        case OPT_EPOCHS: rc = cal_parse_long("--epochs", optarg, 1, 1000, &v); o.epochs = (int32_t)v; break;
        case OPT_CHUNK: rc = cal_parse_long("--chunk", optarg, 2, 1L << 20, &v); o.chunk = (int32_t)v; break;
        case 't': rc = cal_parse_long("-t", optarg, 1, 1024, &v); o.n_threads = (int32_t)v; break;
        case OPT_SEED: rc = cal_parse_long("--seed", optarg, 0, __LONG_MAX__, &v); o.seed = (uint64_t)v; break;
        case OPT_BATCH: rc = cal_parse_long("--batch", optarg, 1, 1L << 16, &v); o.batch = (int32_t)v; break;
        case OPT_LR: {
            char *end;
            errno = 0;
            double r = strtod(optarg, &end);
            if (errno || *end || end == optarg || !(r > 0.0 && r < 1.0))
                rc = pi_fail(PI_E_INVAL, "--lr expects a number in (0, 1), got '%s'", optarg);
            o.lr = (float)r;
            break;
        }
        case OPT_RECALL: {
            char *end;
            errno = 0;
            double r = strtod(optarg, &end);
            if (errno || *end || end == optarg || !(r > 0.0 && r < 1.0))
                rc = pi_fail(PI_E_INVAL, "--recall expects a number in (0, 1), got '%s'", optarg);
            o.recall = (float)r;
            break;
        }
        case OPT_REPORT: o.report_svg = optarg; break;
        case OPT_JSON_STATS: o.json_stats = optarg; break;
        case OPT_F32_PRED: o.f32_pred = true; break;
        case 'q': o.quiet = true; break;
        case 'h': cal_usage(stdout); return 0;
        default: cal_usage(stderr); return 2;
        }
    }
    for (; !rc && optind < argc; optind++) {
        if (!o.model)
            o.model = argv[optind];
        else
            rc = pi_fail(PI_E_INVAL, "unexpected argument '%s' (one MODEL.gguf only)", argv[optind]);
    }
    if (!rc && (!o.model || !o.out || o.n_data == 0))
        rc = pi_fail(PI_E_INVAL, "need MODEL.gguf, --data TEXT and -o OUT.powerinfer.gguf");
    if (rc) {
        fprintf(stderr, "pictl calibrate: %s\n", pi_errmsg());
        cal_usage(stderr);
        return 2;
    }
    if ((rc = cal_run(&o)))
        return pictl_error("calibrate", o.model, rc);
    return 0;
}
