/* pictl — the command-line front end: dispatches to one subcommand. */
#include <stdio.h>
#include <string.h>

#include "convert.h"
#include "pi_err.h"
#include "pictl.h"

#ifndef PI_VERSION
#define PI_VERSION "unknown" /* tools/meson.build defines it from the project version */
#endif

struct subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct subcommand commands[] = {
    { "run", cmd_run, "run -m MODEL -p PROMPT [-n N] [sampling flags]   generate a completion" },
    { "tokenize", cmd_tokenize, "tokenize -m MODEL -p TEXT                     print token ids" },
    { "perplexity", cmd_perplexity, "perplexity -m MODEL -f TEXTFILE [-c CTX]   perplexity of a text" },
    { "start", cmd_start, "start -m MODEL [--name N] [-t T] [-c CTX]       start an instance (daemon)" },
    { "chat", cmd_chat, "chat [--name N | -m MODEL] [--system TEXT]     interactive chat (chat templates)" },
    { "generate", cmd_generate, "generate -p PROMPT [--name N] [-n N] [...]   a completion from an instance" },
    { "status", cmd_status, "status [--name N] [--json]                    state of an instance" },
    { "stop", cmd_stop, "stop [--name N]                               stop an instance" },
    { "restart", cmd_restart, "restart STAGE [--name N]                      restart one stage" },
    { "logs", cmd_logs, "logs STAGE [--name N] [-f]                    a stage's log" },
    { "profile", cmd_profile, "profile [--name N] [--json] [--trace FILE]    per-stage, per-layer timings" },
    { "synth", cmd_synth, "synth --shape S -o OUT.gguf [--type T] [--pwri]  synthetic sparse model" },
    { "calibrate", cmd_calibrate, "calibrate MODEL.gguf --data TEXT -o OUT.powerinfer.gguf   train sparsity predictors" },
    { "bundle", cmd_bundle, "bundle MODEL.gguf [-o OUT] [--verify]       FFN rows bundled per neuron (the disk tier)" },
    { "quantize", cmd_quantize, "quantize IN.gguf OUT.gguf TYPE [--pure ...]   re-quantize (llama-quantize types)" },
    { "convert", convert_main, "convert HF_DIR -o OUT.gguf [--type T]         Hugging Face model -> GGUF" },
};

static void usage(FILE *out)
{
    fprintf(out, "usage: pictl COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %s\n", commands[i].help);
    fprintf(out, "\n'pictl COMMAND --help' for a command's options; 'pictl --version' for the version.\n");
}

int pictl_error(const char *cmd, const char *what, int rc)
{
    const char *detail = pi_errmsg();
    fprintf(stderr, "pictl %s: %s: %s%s%s\n", cmd, what, pi_strerror(rc), detail[0] ? ": " : "", detail);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
        printf("pictl (pinfer) %s\n", PI_VERSION);
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "pictl: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
