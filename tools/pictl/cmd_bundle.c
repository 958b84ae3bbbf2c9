/* pictl bundle — write (or check) the bundled FFN sidecar of a PowerInfer model (engine/bundle.h):
 * per layer, neuron i's gate, up and ffn_down_t rows in one O_DIRECT-aligned record, what the disk
 * tier (--ram-budget) reads. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bundle.h"
#include "gguf.h"
#include "model.h"
#include "pi_err.h"
#include "pictl.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: pictl bundle MODEL.gguf [-o OUT] [--align BYTES] [--verify]\n"
               "  writes MODEL.gguf%s (or OUT): each FFN neuron's gate, up and down_t rows in one record\n"
               "  --align BYTES  record alignment, a power of two >= 512 (default %u: O_DIRECT on 4K sectors)\n"
               "  --verify       check an existing bundle against the model, every row, instead of writing\n",
            BUNDLE_SUFFIX, BUNDLE_DEFAULT_ALIGN);
}

int cmd_bundle(int argc, char **argv)
{
    enum { OPT_ALIGN = 1000, OPT_VERIFY };
    static const struct option longopts[] = {
        { "output", required_argument, NULL, 'o' },
        { "align", required_argument, NULL, OPT_ALIGN },
        { "verify", no_argument, NULL, OPT_VERIFY },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *out = NULL;
    unsigned long align = BUNDLE_DEFAULT_ALIGN;
    bool verify = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'o': out = optarg; break;
        case OPT_ALIGN:
            align = strtoul(optarg, &end, 10);
            if (*end || end == optarg || align < 512 || align > (1ul << 20) || (align & (align - 1))) {
                fprintf(stderr, "pictl bundle: --align expects a power of two in [512, 1048576], got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_VERIFY: verify = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    const char *model = argv[optind];
    char path[4096];
    if (out)
        snprintf(path, sizeof path, "%s", out);
    else if (bundle_default_path(model, path, sizeof path))
        return pictl_error("bundle", model, -PI_E_INVAL);
    /* the writer renames OUT.tmp over OUT: -o naming the model would replace it */
    int rc = verify ? 0 : gguf_check_not_input(path, model, "the model");
    if (rc)
        return pictl_error("bundle", path, rc);
    struct pi_model *m = NULL;
    if ((rc = model_load(&m, model)))
        return pictl_error("bundle", model, rc);
    if (verify) {
        int fd;
        bool direct;
        struct bundle_hdr h;
        if (!(rc = bundle_open(path, m, false, &fd, &direct, &h))) {
            rc = bundle_verify(fd, &h, m);
            close(fd);
        }
        if (!rc)
            printf("%s: %u layers x %u neurons, records of %llu bytes (align %u): every row matches %s\n", path,
                   h.n_layer, h.n_ff, (unsigned long long)h.stride, h.align, model);
    } else {
        uint64_t bytes = 0;
        struct bundle_hdr h;
        if (!(rc = bundle_plan(m, (uint32_t)align, &h)) && !(rc = bundle_write(m, path, (uint32_t)align, &bytes)))
            printf("%s: %u layers x %u neurons, records of %llu bytes (rows %llu + %llu + %llu, align %u), %.1f MiB\n",
                   path, h.n_layer, h.n_ff, (unsigned long long)h.stride, (unsigned long long)h.gate_bytes,
                   (unsigned long long)h.up_bytes, (unsigned long long)h.down_bytes, h.align,
                   (double)bytes / (1 << 20));
    }
    model_free(m);
    return rc ? pictl_error("bundle", path, rc) : 0;
}
