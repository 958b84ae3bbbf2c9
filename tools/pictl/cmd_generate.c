/* pictl generate — one completion from a running instance, and the pipeline path of `pictl run`.
 *
 * The request, its token stream and its release go through supervisor/client.h (shared with apid);
 * this file turns the flags into the request and prints the pieces as they arrive. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "instance.h"
#include "model.h"
#include "pi_err.h"
#include "predictor.h"
#include "pictl.h"
#include "supervisor.h"
#include "quant.h"
#include "prof_snap.h"
#include "run_opts.h"
#include "stage.h"
#include "tokenizer.h"

#define STREAM_WAIT_MS 200  /* futex wait slice: check the supervisor between slices */
#define PIECE_MAX 256

struct gen_result {
    int32_t n_prompt, n_gen;
    double prefill_ms, decode_ms;
    uint32_t queued_steps;
    bool hit_context_end;
    json_t *ids;
    /* the stages' profile counters when the first token came (the end of the prefill), and then */
    const struct pi_ctl *ctl;
    struct prof_snap *first;
    uint64_t first_ns;
    uint32_t first_n;
    uint64_t end_ns;
    json_t *dprof; /* prof_snap_span of the decode, or NULL */
};

/* The decode's profile span (prof_snap.h), once the request is done; NULL without a first copy. */
static json_t *decode_profile(const struct pi_ctl *ctl, const struct gen_result *g)
{
    struct prof_snap *end = g->first && g->first_ns ? malloc(sizeof *end) : NULL;
    json_t *j = NULL;
    if (end) {
        prof_snap_take(ctl, end);
        j = prof_snap_span(g->first, end, ctl->n_layer, g->n_gen - (int32_t)g->first_n, g->end_ns - g->first_ns);
    }
    free(end);
    return j;
}

/* "[perf]"'s split of a layer between gpud and cpud and the hand-off's PCIe traffic, when the FFN
 * was split (cpud computed) or went over PCIe; "" otherwise. */
static void split_text(const struct pi_ctl *ctl, json_t *dprof, char *buf, size_t cap)
{
    buf[0] = 0;
    json_t *pt = json_object_get(dprof, "per_token");
    const double cc = json_real_value(json_object_get(pt, "cpud_compute_ms"));
    const double pcie = json_real_value(json_object_get(pt, "pcie_d2h_mb")) + json_real_value(json_object_get(pt, "pcie_h2d_mb"));
    if (!pt || ctl->n_layer < 1 || (cc <= 0 && pcie <= 0))
        return;
    const double us = 1e3 / ctl->n_layer;
    char link[64] = ""; /* no PCIe on the CPU backend */
    if (pcie > 0)
        snprintf(link, sizeof link, " | PCIe %.1f KiB/token (%.2f GB/s)", pcie * 1e6 / 1024,
                 json_real_value(json_object_get(dprof, "pcie_gb_s")));
    snprintf(buf, cap, " | per layer: gpud %.0f us + wait %.0f us, cpud %.0f us%s",
             json_real_value(json_object_get(pt, "gpud_compute_ms")) * us,
             json_real_value(json_object_get(pt, "gpud_wait_ms")) * us, cc * us, link);
}

static int write_stats(const char *path, const struct pi_model *m, const struct pi_ctl *ctl,
                       const struct gen_result *g)
{
    json_t *j = json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:i, s:O, s:b}", "model", m->name, "n_prompt", g->n_prompt,
                          "n_gen", g->n_gen, "prefill_ms", g->prefill_ms, "decode_ms", g->decode_ms, "decode_tok_s",
                          g->decode_ms > 0 ? g->n_gen * 1e3 / g->decode_ms : 0.0, "threads", ctl->n_threads, "tokens",
                          g->ids, "hit_context_end", g->hit_context_end);
    json_t *st = j ? inst_status_json(ctl) : NULL;
    if (st) { /* the instance's device memory by kind and its hot set */
        json_object_set(j, "vram", json_object_get(st, "vram"));
        json_object_set(j, "backend", json_object_get(st, "backend"));
        if (json_object_get(st, "disk")) /* the pipeline's disk tier: bytes/token, hit rate, waits, fallbacks */
            json_object_set(j, "disk", json_object_get(st, "disk"));
        json_decref(st);
    }
    if (j) /* steps the oldest waiting request spent queued behind busy sequences */
        json_object_set_new(j, "queued_steps", json_integer(g->queued_steps));
    if (j && g->dprof) /* decode only: from the first token to the last */
        json_object_set(j, "decode_profile", g->dprof);
    if (!j)
        return pi_fail(PI_E_NOMEM, "cannot build --json-stats");
    int rc = json_dump_file(j, path, JSON_INDENT(1)) ? pi_fail(PI_E_IO, "cannot write --json-stats '%s'", path) : 0;
    json_decref(j);
    return rc;
}

/* gpud appends rows to the file the request names: it must be absolute (gpud's cwd is not ours)
 * and start empty. */
static int prepare_logits_file(const char *path, char *abs, size_t cap)
{
    char cwd[PATH_MAX];
    int n;
    if (path[0] == '/')
        n = snprintf(abs, cap, "%s", path);
    else if (getcwd(cwd, sizeof cwd))
        n = snprintf(abs, cap, "%s/%s", cwd, path);
    else
        return pi_fail(errno, "--dump-logits: cannot get the current directory: %s", strerror(errno));
    if (n < 0 || (size_t)n >= cap)
        return pi_fail(PI_E_RANGE, "--dump-logits: path '%s' is too long", path);
    FILE *f = fopen(abs, "wb");
    if (!f)
        return pi_fail(errno, "cannot open --dump-logits file '%s': %s", abs, strerror(errno));
    fclose(f);
    return 0;
}

static json_t *build_request(const struct run_opts *o, const char *logits_abs)
{
    const struct samp_params *sp = &o->gen.samp;
    json_t *seed = sp->seed <= (uint64_t)INT64_MAX ? json_integer((json_int_t)sp->seed) : NULL;
    if (!seed) {
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)sp->seed);
        seed = json_string(buf);
    }
    return json_pack("{s:s, s:s, s:i, s:f, s:i, s:f, s:f, s:f, s:i, s:o, s:b, s:b, s:s, s:i}", "cmd", "generate", "prompt",
                     o->prompt, "n_predict", o->gen.n_predict, "temp", (double)sp->temp, "top_k", sp->top_k, "top_p",
                     (double)sp->top_p, "min_p", (double)sp->min_p, "repeat_penalty", (double)sp->repeat_penalty,
                     "repeat_last_n", sp->repeat_last_n, "seed", seed, "ignore_eos", o->gen.ignore_eos,
                     "dense", o->dense, "dump_logits", logits_abs, "client_pid", (int)getpid());
}

/* Print tokens as they arrive until the request is DONE or FAILED. */
static int stream(const struct pic_stream *st, const struct pi_model *m, const volatile sig_atomic_t *interrupted,
                  struct gen_result *g)
{
    uint32_t printed = 0, n = 0;
    for (;;) {
        int rc = pic_wait(st, &n, STREAM_WAIT_MS);
        if (rc < 0)
            return rc;
        if (n > 0 && g->first && !g->first_ns) {
            prof_snap_take(g->ctl, g->first);
            g->first_ns = stage_now_ns();
            g->first_n = n;
        }
        for (; printed < n; printed++) {
            const int32_t tok = pic_token(st, printed);
            char buf[PIECE_MAX];
            int len = tok_piece(m->tok, tok, false, buf, sizeof buf);
            if (len > 0)
                fwrite(buf, 1, (size_t)len < sizeof buf ? (size_t)len : sizeof buf, stdout);
            json_array_append_new(g->ids, json_integer(tok));
        }
        fflush(stdout);
        if (rc == PIC_DONE) {
            g->n_gen = (int32_t)n;
            g->end_ns = stage_now_ns();
            return 0;
        }
        if (interrupted && *interrupted)
            return pi_fail(EINTR, "interrupted");
    }
}

int gen_client_run(const char *name, const struct run_opts *o, const volatile sig_atomic_t *interrupted)
{
    struct pic_conn conn;
    struct pic_stream st;
    struct pi_model *m = NULL;
    json_t *req = NULL;
    struct gen_result g = { .ids = json_array() };
    char logits_abs[PI_PATH_MAX] = "";
    int rc = pic_open(&conn, name);
    if (rc)
        goto out;
    const struct pi_ctl *ctl = conn.ctl;
    /* the tokenizer and the [perf] line's model description, from the instance's own file */
    if ((rc = model_load(&m, ctl->model_path)))
        goto out;
    if (o->dump_logits && (rc = prepare_logits_file(o->dump_logits, logits_abs, sizeof logits_abs)))
        goto out;
    if (!(req = build_request(o, logits_abs))) {
        /* jansson refuses strings that are not UTF-8 (run_opts_parse checked the prompt) */
        rc = pi_fail(PI_E_INVAL, "cannot build the request: the --dump-logits path is not UTF-8, or out of memory");
        goto out;
    }
    json_object_del(req, "cmd");
    g.ctl = ctl;
    if (!(g.first = malloc(sizeof *g.first))) {
        rc = pi_fail(PI_E_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = pic_generate(&conn, req, &st)))
        goto out;
    rc = stream(&st, m, interrupted, &g);
    fputc('\n', stdout);
    fflush(stdout);
    const struct pi_request *r = st.r;
    g.n_prompt = r->n_prompt;
    g.prefill_ms = r->prefill_ns / 1e6;
    g.queued_steps = r->queued_steps;
    g.decode_ms = r->decode_ns / 1e6;
    /* gen_run's rule: the context filled up when a token had no KV slot left */
    g.hit_context_end = rc == 0 && g.n_prompt + g.n_gen > ctl->n_ctx;
    /* interrupted (Ctrl-C): cancel the request, which frees its slot once gpud has stopped it */
    {
        int rrc = rc == -EINTR ? pic_cancel(&st) : pic_release(&st);
        if (rrc && !rc)
            rc = rrc; /* (a failed cancel leaves the request to the supervisor's client sweep) */
    }
    if (rc)
        goto out;
    /* the decode's split between the stages (with other clients on the instance, theirs too) */
    g.dprof = decode_profile(ctl, &g);
    char split[192];
    split_text(ctl, g.dprof, split, sizeof split);
    /* the GPU's share: VRAM allocated (+ the CUDA context) against the budget, hot neurons */
    char vram[256] = "";
    const uint64_t ours = ctl->vram_weights + ctl->vram_hot + ctl->vram_pred + ctl->vram_kv + ctl->vram_scratch;
    if (ctl->vram_context || ctl->vram_budget >= 0) {
        const double gib = (double)(1ull << 30);
        char budget[48] = "no budget", cov[48] = "", mem[128] = "";
        if (ctl->vram_budget >= 0)
            snprintf(budget, sizeof budget, "budget %.2f GiB", (double)ctl->vram_budget / gib);
        if (ctl->hot_coverage >= 0)
            snprintf(cov, sizeof cov, ", %.1f%% of activations", 100.0 * ctl->hot_coverage);
        /* a budget with auto on a host without a device: the placement stands, on gpud's CPU backend */
        if (strncmp(ctl->backend_used, "cpu", sizeof ctl->backend_used))
            snprintf(mem, sizeof mem, " | vram %.2f GiB + context %.2f GiB (%s)", (double)ours / gib,
                     (double)ctl->vram_context / gib, budget);
        snprintf(vram, sizeof vram, "%s | hot neurons %lld of %lld%s", mem, (long long)ctl->hot_neurons,
                 (long long)ctl->n_layer * ctl->n_ff, cov);
    }
    char why[sizeof ctl->backend_why + 1];
    snprintf(why, sizeof why, "%.*s", (int)sizeof ctl->backend_why, ctl->backend_why);
    run_opts_note_backend("gpud", why);
    fprintf(stderr,
            "[perf] model %s (%s%s%s%.*s), threads %d | prompt %d tok, prefill %.1f ms (%.1f tok/s) | decode %d tok, "
            "%.1f ms, %.2f tok/s%s%s%s\n",
            m->name, quant_traits(m->layers[0].wq.type)->name, pred_available(m) && !o->dense ? ", sparse" : "",
            ctl->backend_used[0] && strcmp(ctl->backend_used, "cpu") ? ", " : "",
            ctl->backend_used[0] && strcmp(ctl->backend_used, "cpu") ? (int)sizeof ctl->backend_used : 0,
            ctl->backend_used, ctl->n_threads, g.n_prompt, g.prefill_ms,
            g.prefill_ms > 0 ? g.n_prompt * 1e3 / g.prefill_ms : 0.0, g.n_gen, g.decode_ms,
            g.decode_ms > 0 ? g.n_gen * 1e3 / g.decode_ms : 0.0, vram, split,
            g.hit_context_end ? " (stopped: context full)" : "");
    if (o->json_stats)
        rc = write_stats(o->json_stats, m, ctl, &g);
out:
    json_decref(req);
    json_decref(g.ids);
    free(g.first);
    json_decref(g.dprof);
    model_free(m);
    pic_close(&conn);
    return rc;
}

int pictl_take_name(int argc, char **argv, const char **name)
{
    int out = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--name") && i + 1 < argc) {
            *name = argv[++i];
            continue;
        }
        if (i > 0 && !strncmp(argv[i], "--name=", 7)) {
            *name = argv[i] + 7;
            continue;
        }
        argv[out++] = argv[i];
    }
    argv[out] = NULL;
    return out;
}

int cmd_generate(int argc, char **argv)
{
    const char *name = INST_DEFAULT_NAME;
    argc = pictl_take_name(argc, argv, &name);
    struct run_opts o;
    int rc = run_opts_parse(&o, argc, argv, RUN_OPTS_GENERATE); /* refuses what the instance fixed */
    if (rc)
        return rc > 0 ? 0 : 2;
    if ((rc = inst_check_name(name))) {
        run_opts_fini(&o);
        return pictl_error("generate", "--name", rc);
    }
    rc = gen_client_run(name, &o, NULL);
    run_opts_fini(&o);
    return rc ? pictl_error("generate", name, rc) : 0;
}

/* ---- pictl run (pipeline): start an ephemeral instance, generate, stop ---- */

#define RUN_KEEP_ENV "PINFER_KEEP_LOGS" /* set: keep the ephemeral instance's logs directory */

static volatile sig_atomic_t run_interrupted;

static void on_run_signal(int sig)
{
    (void)sig;
    run_interrupted = 1;
}

int run_pipeline(const struct run_opts *o)
{
    char name[PI_INSTANCE_MAX];
    snprintf(name, sizeof name, "run%d", (int)getpid());
    /* SIGINT/SIGTERM: stop streaming and still stop the instance (no SA_RESTART: the futex wait
     * returns EINTR at once) */
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_run_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    /* one request: one sequence (the KV cache holds -c cells, as in-process) */
    struct start_opts so = { .name = name, .model = o->model, .n_threads = o->n_threads, .n_ctx = o->n_ctx,
                             .n_ctx_given = o->n_ctx_given, .n_parallel = 1, .cache_type = o->cache_type, .backend = o->backend,
                             .gpu_ffn_share = SUP_DEFAULT_GPU_FFN_SHARE, .vram_budget_gib = o->vram_budget_gib,
                             .ram_budget_gib = o->ram_budget_gib, .reset_gpu_index = o->reset_gpu_index, .disable_gpu_index = o->disable_gpu_index,
                             .n_gpu_layers = o->n_gpu_layers,
                             .audit_rate = o->audit_rate, .predict_in = o->predict_in, .quiet = true, .owner_pid = getpid() };
    int exit_code = 1;
    int rc = inst_start(&so);
    if (rc) {
        pictl_error("run", o->model, rc);
        goto out;
    }
    rc = gen_client_run(name, o, &run_interrupted);
    if (rc)
        pictl_error("run", "generate", rc);
    else
        exit_code = 0;
    int src = inst_stop(name);
    if (src) {
        pictl_error("run", "stop the instance", src);
        exit_code = 1;
    }
    if (!getenv(RUN_KEEP_ENV))
        inst_remove_dir(name);
out:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return exit_code;
}
