/* pictl run — one completion, in process: prompt → tokens → prefill → sample/decode loop.
 * Only the completion goes to stdout; a one-line [perf] summary goes to stderr. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eval.h"
#include "generate.h"
#include "model.h"
#include "pi_err.h"
#include "pictl.h"
#include "quant.h"
#include "run_disk.h"
#include "run_opts.h"
#include "tokenizer.h"

struct run_sink {
    const struct pi_model *m;
    FILE *logits_out;
    json_t *ids; /* generated ids for --json-stats */
    int err;
};

static int on_token(void *user, int32_t id, const float *logits, int32_t n_vocab)
{
    struct run_sink *s = user;
    if (s->logits_out && fwrite(logits, sizeof(float), (size_t)n_vocab, s->logits_out) != (size_t)n_vocab)
        return pi_fail(PI_E_IO, "cannot write --dump-logits file");
    if (s->ids)
        json_array_append_new(s->ids, json_integer(id));
    char buf[256];
    int n = tok_piece(s->m->tok, id, false, buf, sizeof buf);
    if (n > 0) {
        fwrite(buf, 1, (size_t)n < sizeof buf ? (size_t)n : sizeof buf, stdout);
        fflush(stdout);
    }
    return 0;
}

/* Per layer: FFN neurons computed and FFN weight bytes read per evaluated token (prompt and
 * generated tokens together; decode dominates a run of many generated tokens). */
static json_t *ffn_stats(const struct pi_ctx *c, const struct pi_model *m)
{
    json_t *rows = json_array();
    for (int l = 0; l < m->hp.n_layer; l++) {
        uint64_t neurons = 0, tokens = 0, bytes = 0;
        ctx_sparse_stats(c, l, &neurons, &tokens, &bytes);
        const double t = tokens ? (double)tokens : 1.0;
        json_array_append_new(rows, json_pack("{s:i, s:f, s:i, s:f}", "layer", l, "neurons_per_token", neurons / t,
                                              "n_ff", m->hp.n_ff, "ffn_mib_per_token", bytes / t / (1 << 20)));
    }
    return rows;
}

static int write_stats(const char *path, const struct run_opts *o, const struct pi_model *m,
                       const struct pi_ctx *c, const struct gen_stats *st, json_t *ids, const struct run_disk *disk,
                       const char *weights_why)
{
    json_t *j = json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:i, s:O, s:b, s:b, s:o}", "model", m->name, "n_prompt",
                          st->n_prompt, "n_gen", st->n_gen, "prefill_ms", st->prefill_ms, "decode_ms",
                          st->decode_ms, "decode_tok_s", st->decode_ms > 0 ? st->n_gen * 1e3 / st->decode_ms : 0.0,
                          "threads", o->n_threads, "tokens", ids, "hit_context_end", st->hit_context_end, "sparse",
                          ctx_is_sparse(c), "ffn", ffn_stats(c, m));
    if (!j)
        return pi_fail(PI_E_NOMEM, "cannot build --json-stats");
    if (disk && disk->nc)
        json_object_set_new(j, "disk", run_disk_json(disk));
    /* how the weights are held, and how much of them the kernel put on huge pages */
    json_object_set_new(j, "weights", json_pack("{s:s, s:f}", "held", weights_why, "huge_mib",
                                                (double)model_huge_bytes(m) / (1 << 20)));
    /* host time per phase over the whole run (prefill and decode): where a step's time goes */
    json_object_set_new(j, "phase_ms", json_pack("{s:f, s:f, s:f, s:f}", "attn", ctx_phase_ms(c, EVAL_ATTN), "predict",
                                                 ctx_phase_ms(c, EVAL_PREDICT), "ffn", ctx_phase_ms(c, EVAL_FFN),
                                                 "output", ctx_phase_ms(c, EVAL_OUTPUT)));
    int rc = json_dump_file(j, path, JSON_INDENT(1)) ? pi_fail(PI_E_IO, "cannot write --json-stats '%s'", path) : 0;
    json_decref(j);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o;
    int rc = run_opts_parse(&o, argc, argv, RUN_OPTS_RUN);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (!o.inproc) {
        int code = run_pipeline(&o);
        run_opts_fini(&o);
        return code;
    }

    struct pi_model *m = NULL;
    struct pi_ctx *c = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    FILE *lf = NULL;
    json_t *gen_ids = json_array();
    int exit_code = 1;
    struct run_disk disk = { 0 };

    const char *weights_why = "";
    if ((rc = model_load_as(&m, o.model, run_opts_weights(&o, &weights_why)))) {
        pictl_error("run", o.model, rc);
        goto out;
    }
    if ((rc = tok_encode(m->tok, o.prompt, strlen(o.prompt), tok_add_bos(m->tok), true, &ids, &n_ids))) {
        pictl_error("run", "tokenize prompt", rc);
        goto out;
    }
    struct pi_ctx_params cp = { .n_ctx = o.n_ctx, .n_batch = o.n_batch, .n_threads = o.n_threads, .sparse = !o.dense,
                                .cache_type = o.cache_type, .backend = o.backend };
    if ((rc = ctx_new(&c, m, &cp))) {
        pictl_error("run", "create context", rc);
        goto out;
    }
    run_opts_note_backend("pictl run", ctx_backend_why(c));
    if (o.n_ctx_given)
        run_opts_warn_ctx("pictl run", ctx_n_ctx(c), m->hp.n_ctx_train);
    if (o.ram_budget_gib >= 0 && (rc = run_disk_open(&disk, m, o.model, o.bundle, o.ram_budget_gib,
                                                     (unsigned)o.stream_qd, c))) {
        pictl_error("run", "--ram-budget", rc);
        goto out;
    }
    if (o.dump_logits && !(lf = fopen(o.dump_logits, "wb"))) {
        pictl_error("run", o.dump_logits, -errno);
        goto out;
    }
    struct run_sink sink = { .m = m, .logits_out = lf, .ids = gen_ids };
    o.gen.candidates_only = !lf; /* on_token reads the logits only to dump them */
    struct gen_stats st;
    rc = gen_run(c, m, &o.gen, ids, (int32_t)n_ids, on_token, &sink, &st);
    fputc('\n', stdout);
    fflush(stdout);
    if (rc) {
        pictl_error("run", "generate", rc);
        goto out;
    }
    if (lf && fclose(lf)) {
        lf = NULL;
        pictl_error("run", o.dump_logits, -errno);
        goto out;
    }
    lf = NULL;
    fprintf(stderr,
            "[perf] model %s (%s%s%s%s), threads %d | prompt %d tok, prefill %.1f ms (%.1f tok/s) | decode %d tok, "
            "%.1f ms, %.2f tok/s%s\n",
            m->name, quant_traits(m->layers[0].wq.type)->name, ctx_is_sparse(c) ? ", sparse" : "",
            strcmp(ctx_backend(c), "cpu") ? ", " : "", strcmp(ctx_backend(c), "cpu") ? ctx_backend(c) : "",
            o.n_threads, st.n_prompt, st.prefill_ms,
            st.prefill_ms > 0 ? st.n_prompt * 1e3 / st.prefill_ms : 0.0, st.n_gen, st.decode_ms,
            st.decode_ms > 0 ? st.n_gen * 1e3 / st.decode_ms : 0.0,
            st.hit_context_end ? " (stopped: context full)" : "");
    if (disk.nc && o.disk_floor && (rc = run_disk_floor(&disk, 4096))) {
        pictl_error("run", "--disk-floor", rc);
        goto out;
    }
    if (disk.nc)
        run_disk_print(&disk, stderr);
    if (o.json_stats && (rc = write_stats(o.json_stats, &o, m, c, &st, gen_ids, &disk, weights_why))) {
        pictl_error("run", o.json_stats, rc);
        goto out;
    }
    exit_code = 0;
out:
    if (lf)
        fclose(lf);
    json_decref(gen_ids);
    free(ids);
    ctx_free(c);
    run_disk_close(&disk);
    model_free(m);
    run_opts_fini(&o);
    return exit_code;
}
