/* fuzz_model — any bytes as a whole model file: the engine's loader (engine/model.c: architecture
 * and hyperparameters, the tokenizer, every tensor bound by name, type and shape, PowerInfer's
 * predictors and ffn_down_t) and, for a file it accepts, a short forward pass on the CPU backend
 * (a 3-token prefill and one decode step, sparse when the file has predictors).
 *
 * A GGUF file is what users download, so what the loader accepts is what the kernels then index
 * with: a shape the loader lets through that the kernels do not expect is an out-of-bounds read,
 * which ASan reports. Oracles: a refusal names its reason (pi_errmsg); an accepted model keeps
 * the promises eval.c relies on (positive sizes, heads that divide, a vocabulary equal to the
 * embedding rows and the tokenizer's count, every layer's tensors present); the context opens and
 * evaluates, or refuses with a message. Files whose weights exceed a few MiB are loaded but not
 * run (the fuzzer's time goes to the loader). The image is copied to a page-aligned buffer first,
 * as the files and the pipeline's weights segment are. */
#include <math.h>
#include <stdlib.h>

#include "eval.h"
#include "fuzz_util.h"
#include "model.h"
#include "pi_err.h"
#include "tokenizer.h"

#define RUN_MAX_BYTES (4u << 20) /* the largest file run through the forward pass */
#define RUN_N_CTX 8

static void check_model(const struct pi_model *m)
{
    const struct pi_hparams *hp = &m->hp;
    FUZZ_CHECK(hp->n_layer >= 1 && hp->n_embd >= 1 && hp->n_ff >= 1 && hp->n_vocab >= 1);
    FUZZ_CHECK(hp->n_head >= 1 && hp->n_head_kv >= 1 && hp->n_head % hp->n_head_kv == 0 && hp->head_dim >= 1);
    FUZZ_CHECK(hp->n_vocab == tok_n_vocab(m->tok));
    FUZZ_CHECK(m->token_embd.data && m->output.data && m->output_norm.data && m->layers);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct pi_layer *l = &m->layers[il];
        FUZZ_CHECK(l->wq.data && l->wk.data && l->wv.data && l->wo.data && l->attn_norm.data);
        FUZZ_CHECK(l->ffn_up.data && (l->ffn_down.data || l->ffn_down_t.data));
        FUZZ_CHECK(!l->fc1.data == !l->fc2.data);
    }
}

static void run_model(const struct pi_model *m)
{
    struct pi_ctx *c = NULL;
    const struct pi_ctx_params p = { .n_ctx = RUN_N_CTX, .n_batch = 4, .n_threads = 1, .sparse = true };
    pi_errmsg_clear();
    if (ctx_new(&c, m, &p)) {
        FUZZ_CHECK(pi_errmsg()[0] != '\0');
        return;
    }
    const int32_t V = m->hp.n_vocab;
    int32_t toks[3] = { 0, 1 % V, 2 % V };
    float *logits = malloc((size_t)3 * (size_t)V * sizeof *logits);
    FUZZ_CHECK(logits != NULL);
    pi_errmsg_clear();
    if (ctx_eval(c, toks, 3, 0, logits, true) == 0) {
        int32_t next = (int32_t)(fabsf(logits[0]) < 1e9f ? (uint32_t)fabsf(logits[0]) % (uint32_t)V : 0);
        if (ctx_eval(c, &next, 1, 3, logits, false))
            FUZZ_CHECK(pi_errmsg()[0] != '\0');
    } else {
        FUZZ_CHECK(pi_errmsg()[0] != '\0');
    }
    free(logits);
    ctx_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void *img = NULL;
    if (posix_memalign(&img, 4096, size ? size : 1))
        return 0;
    memcpy(img, data, size);
    struct pi_model *m = NULL;
    pi_errmsg_clear();
    if (model_load_image(&m, img, size) == 0) {
        check_model(m);
        if (size <= RUN_MAX_BYTES)
            run_model(m);
        model_free(m);
    } else {
        FUZZ_CHECK(pi_errmsg()[0] != '\0');
    }
    free(img);
    return 0;
}
