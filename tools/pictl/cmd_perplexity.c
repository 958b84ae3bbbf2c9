/* pictl perplexity — llama.cpp's method: split the tokenized text into chunks of n_ctx tokens
 * (the first token of each replaced by BOS when the model uses one), evaluate each chunk from an
 * empty cache and score the second half of it (the first half is context), PPL = exp(mean NLL). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "generate.h"
#include "model.h"
#include "pi_err.h"
#include "pictl.h"
#include "run_opts.h"
#include "tokenizer.h"

/* -log softmax(logits)[target], in double */
static double token_nll(const float *logits, int32_t n_vocab, int32_t target)
{
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - mx);
    return log(sum) - ((double)logits[target] - mx);
}

int cmd_perplexity(int argc, char **argv)
{
    struct run_opts o;
    int rc = run_opts_parse(&o, argc, argv, RUN_OPTS_PERPLEXITY);
    if (rc)
        return rc > 0 ? 0 : 2;
    struct pi_model *m = NULL;
    struct pi_ctx *c = NULL;
    char *text = NULL;
    size_t text_len = 0, n_tok = 0;
    int32_t *toks = NULL, *chunk = NULL;
    float *logits = NULL;
    int exit_code = 1;

    if ((rc = read_text_file(o.file, &text, &text_len))) {
        pictl_error("perplexity", o.file, rc);
        goto out;
    }
    const char *weights_why = "";
    if ((rc = model_load_as(&m, o.model, run_opts_weights(&o, &weights_why)))) {
        pictl_error("perplexity", o.model, rc);
        goto out;
    }
    if ((rc = tok_encode(m->tok, text, text_len, tok_add_bos(m->tok), false, &toks, &n_tok))) {
        pictl_error("perplexity", "tokenize", rc);
        goto out;
    }
    const int32_t n_ctx = o.n_ctx ? o.n_ctx : m->hp.n_ctx_train, V = m->hp.n_vocab; /* -c 0: the model's */
    if (o.n_ctx_given)
        run_opts_warn_ctx("pictl perplexity", n_ctx, m->hp.n_ctx_train);
    const size_t n_chunks = n_tok / (size_t)n_ctx;
    if (n_chunks == 0) {
        fprintf(stderr, "pictl perplexity: the text has %zu tokens, fewer than one context of %d (lower -c)\n",
                n_tok, n_ctx);
        goto out;
    }
    struct pi_ctx_params cp = { .n_ctx = n_ctx, .n_batch = o.n_batch, .n_threads = o.n_threads, .sparse = !o.dense,
                                .cache_type = o.cache_type, .backend = o.backend };
    if ((rc = ctx_new(&c, m, &cp))) {
        pictl_error("perplexity", "create context", rc);
        goto out;
    }
    run_opts_note_backend("pictl perplexity", ctx_backend_why(c));
    chunk = malloc((size_t)n_ctx * sizeof *chunk);
    logits = malloc((size_t)n_ctx * (size_t)V * sizeof *logits);
    if (!chunk || !logits) {
        fprintf(stderr, "pictl perplexity: out of memory\n");
        goto out;
    }
    double nll = 0.0, nll2 = 0.0;
    size_t count = 0;
    const double t0 = pi_now_ms();
    for (size_t ci = 0; ci < n_chunks; ci++) {
        memcpy(chunk, toks + ci * (size_t)n_ctx, (size_t)n_ctx * sizeof *chunk);
        if (tok_add_bos(m->tok) && tok_bos(m->tok) >= 0)
            chunk[0] = tok_bos(m->tok);
        if ((rc = ctx_eval(c, chunk, n_ctx, 0, logits, true))) {
            pictl_error("perplexity", "eval", rc);
            goto out;
        }
        /* logits row j predicts token j+1 of the original text */
        for (int32_t j = n_ctx / 2; j < n_ctx - 1; j++) {
            const double v = token_nll(logits + (size_t)j * V, V, toks[ci * (size_t)n_ctx + (size_t)j + 1]);
            nll += v;
            nll2 += v * v;
            count++;
        }
        fprintf(stderr, "[%zu]%.4f%s", ci + 1, exp(nll / (double)count), ci + 1 == n_chunks ? "\n" : ",");
    }
    const double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    const double ppl = exp(mean), err = ppl * sqrt(var > 0 ? var / (double)count : 0.0);
    printf("Final estimate: PPL = %.4f +/- %.4f (%zu tokens scored, %zu chunks of %d)\n", ppl, err, count, n_chunks,
           n_ctx);
    fprintf(stderr, "[perf] %.1f ms for %zu tokens (%.1f tok/s), threads %d\n", pi_now_ms() - t0,
            n_chunks * (size_t)n_ctx, n_chunks * (size_t)n_ctx * 1e3 / (pi_now_ms() - t0), o.n_threads);
    exit_code = 0;
out:
    free(text);
    free(toks);
    free(chunk);
    free(logits);
    ctx_free(c);
    model_free(m);
    run_opts_fini(&o);
    return exit_code;
}
