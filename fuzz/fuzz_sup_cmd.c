/* fuzz_sup_cmd — any bytes as one supervisor control message (supervisor/sup_cmd.c).
 *
 * Drives the parse/validate step (sup_cmd_parse) and, for a valid generate, the prompt's
 * tokenization against the embedded model's tokenizer and context (sup_gen_tokenize), without a
 * live instance: no shared memory, no stages. Oracles: a refused message gets an error reply
 * {"ok": false, "error": "..."}; an accepted one has every field inside the range the command
 * documents (supervisor.h). */
#include <jansson.h>
#include <math.h>

#include "fuzz_util.h"
#include "gguf.h"
#include "pi_err.h"
#include "sup_internal.h"
#include "tokenizer.h"

#define FUZZ_N_CTX 256 /* a small context, so that "prompt too long" is reachable */

static struct gguf_file *model;
static struct pi_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    /* a fixed hash seed: jansson's random one orders object iteration (check_keys) differently per
     * process, and CI's fixed-seed run must be repeatable */
    json_object_seed(1);
    if (gguf_open(&model, PI_FUZZ_MODEL) || tok_new_from_gguf(&tok, model)) {
        fprintf(stderr, "fuzz_sup_cmd: cannot load %s: %s\n", PI_FUZZ_MODEL, pi_errmsg());
        abort();
    }
    return 0;
}

/* The status command's reply is built by pictl's cmd_status.c, which libpisup does not hold; only
 * the actions call it, and this target drives no action. */
json_t *inst_status_json(const struct pi_ctl *ctl)
{
    (void)ctl;
    abort();
}

static void check_error_reply(json_t *reply)
{
    FUZZ_CHECK(json_is_object(reply));
    FUZZ_CHECK(json_is_false(json_object_get(reply, "ok")));
    FUZZ_CHECK(json_is_string(json_object_get(reply, "error")));
    char *s = json_dumps(reply, 0);
    FUZZ_CHECK(s != NULL);
    free(s);
    json_decref(reply);
}

static void check_generate(const struct sup_gen_args *g)
{
    FUZZ_CHECK((g->prompt != NULL) != (g->prompt_tokens != NULL));
    FUZZ_CHECK(g->n_predict >= -1 && g->n_predict <= 1LL << 30);
    FUZZ_CHECK(g->sp.temp >= 0 && g->sp.temp <= 100);
    FUZZ_CHECK(g->top_k >= 0 && g->top_k <= 1LL << 30);
    FUZZ_CHECK(g->sp.top_p >= 0 && g->sp.top_p <= 1 && g->sp.min_p >= 0 && g->sp.min_p <= 1);
    FUZZ_CHECK(g->sp.repeat_penalty >= 0.01f && g->sp.repeat_penalty <= 100);
    FUZZ_CHECK(g->last_n >= 0 && g->last_n <= 1LL << 24);
    FUZZ_CHECK(g->client >= 0 && g->client <= INT32_MAX);
    FUZZ_CHECK(fabsf(g->sp.frequency_penalty) <= 2 && fabsf(g->sp.presence_penalty) <= 2);
    FUZZ_CHECK(g->n_probs >= -1 && g->n_probs <= PI_LP_MAX_TOP);
    FUZZ_CHECK(g->n_probs < 0 || (g->n_predict >= 0 && g->n_predict <= PI_LP_MAX_TOKENS));
    FUZZ_CHECK(g->dump && (!g->dump[0] || (g->dump[0] == '/' && strlen(g->dump) < PI_PATH_MAX)));

    int32_t *ids;
    size_t n;
    json_t *reply = sup_gen_tokenize(tok, g, FUZZ_N_CTX, &ids, &n);
    if (reply) {
        FUZZ_CHECK(ids == NULL);
        check_error_reply(reply);
        return;
    }
    FUZZ_CHECK(n >= 1 && n < FUZZ_N_CTX && n <= PI_REQ_MAX_TOKENS);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(tok));
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sup_cmd c;
    json_t *req;
    json_t *reply = sup_cmd_parse((const char *)data, size, &req, &c);
    if (reply) {
        FUZZ_CHECK(req == NULL);
        check_error_reply(reply);
        return 0;
    }
    FUZZ_CHECK(json_is_object(req));
    switch (c.kind) {
    case SUP_CMD_GENERATE: check_generate(&c.gen); break;
    case SUP_CMD_RELEASE:
    case SUP_CMD_CANCEL: FUZZ_CHECK(c.slot >= 0 && c.slot < PI_MAX_REQUESTS && c.id >= 1); break;
    case SUP_CMD_TICKET: FUZZ_CHECK(c.ticket >= 1); break;
    case SUP_CMD_RESTART: FUZZ_CHECK(c.stage >= 0 && c.stage < PI_STAGE_COUNT && c.stage_name); break;
    case SUP_CMD_STATUS:
    case SUP_CMD_STOP: break;
    default: FUZZ_CHECK(!"unknown command kind");
    }
    json_decref(req);
    return 0;
}
