/* fuzz_api_request — any bytes as the body of an OpenAI completion request to apid
 * (apid/request.c: apid_parse_gen), chat or text, against the embedded model's tokenizer and every
 * chat template family, without a live instance.
 *
 * Input: one flags byte, then the body. flags & 1: /v1/chat/completions (else /v1/completions);
 * flags >> 1: the chat template family (modulo their number).
 * Oracles: a refused request has a status of 400, 404 or 500 and a message (the field it names, if
 * any, is one of the body's keys or a path into them); an accepted one becomes a generate command
 * with exactly one of a prompt string or token ids of the vocabulary, max_tokens -1 or within a
 * request slot, at most 16 non-empty stop strings, logprobs -1..20 (and with them max_tokens within
 * the recorded tokens), and a chat request always a rendered prompt. Everything is freed (a leak is
 * a finding). */
#include <jansson.h>

#include "apid.h"
#include "chat_template.h"
#include "fuzz_util.h"
#include "gguf.h"
#include "model.h"
#include "pi_err.h"
#include "pipeline_layout.h"
#include "tokenizer.h"

static struct gguf_file *file;
static struct pi_model model; /* only its tokenizer: what request.c reads of the model */
static struct apid api;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    json_object_seed(1); /* a fixed hash seed: repeatable runs (see fuzz_sup_cmd.c) */
    if (gguf_open(&file, PI_FUZZ_MODEL) || tok_new_from_gguf(&model.tok, file)) {
        fprintf(stderr, "fuzz_api_request: cannot load %s: %s\n", PI_FUZZ_MODEL, pi_errmsg());
        abort();
    }
    api.model = &model;
    snprintf(api.model_id, sizeof api.model_id, "tiny-relu-llama");
    snprintf(api.cfg.model_alias, sizeof api.cfg.model_alias, "alias");
    return 0;
}

static void check_accepted(const struct gen_req *g, bool chat)
{
    FUZZ_CHECK(g->chat == chat);
    FUZZ_CHECK(json_is_object(g->engine));
    json_t *p = json_object_get(g->engine, "prompt"), *ids = json_object_get(g->engine, "prompt_tokens");
    FUZZ_CHECK((p != NULL) != (ids != NULL));
    FUZZ_CHECK((g->prompt != NULL) == (p != NULL) && (g->prompt_ids != NULL) == (ids != NULL));
    if (p)
        FUZZ_CHECK(json_is_string(p) && !strcmp(json_string_value(p), g->prompt));
    if (ids) {
        FUZZ_CHECK(!chat && json_is_array(ids) && json_array_size(ids) == g->n_prompt_ids && g->n_prompt_ids > 0);
        FUZZ_CHECK(g->n_prompt_ids <= PI_REQ_MAX_TOKENS);
        for (size_t i = 0; i < g->n_prompt_ids; i++)
            FUZZ_CHECK(g->prompt_ids[i] >= 0 && g->prompt_ids[i] < tok_n_vocab(model.tok));
    }
    if (chat)
        FUZZ_CHECK(g->prompt != NULL);
    FUZZ_CHECK(g->max_tokens == -1 || (g->max_tokens >= 1 && g->max_tokens <= PI_REQ_MAX_TOKENS));
    FUZZ_CHECK(g->n_stops <= sizeof g->stops / sizeof g->stops[0]);
    for (size_t i = 0; i < g->n_stops; i++)
        FUZZ_CHECK(g->stops[i] && g->stops[i][0]);
    FUZZ_CHECK(g->n_probs >= -1 && g->n_probs <= PI_LP_MAX_TOP);
    if (g->n_probs >= 0)
        FUZZ_CHECK(g->max_tokens <= PI_LP_MAX_TOKENS);
    FUZZ_CHECK(!g->include_usage || g->stream);
    char *s = json_dumps(g->engine, 0); /* what the supervisor is sent */
    FUZZ_CHECK(s != NULL);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const bool chat = data[0] & 1;
    api.family = (enum chat_family)((data[0] >> 1) % CHAT_FAMILY_COUNT);
    json_error_t jerr;
    json_t *body = json_loadb((const char *)data + 1, size - 1, 0, &jerr); /* completions.c's flags */
    if (!body)
        return 0; /* a body that is not JSON is answered before apid_parse_gen */
    struct gen_req g;
    struct apid_err e;
    memset(&e, 0, sizeof e);
    if (apid_parse_gen(&api, body, chat, &g, &e) == 0) {
        check_accepted(&g, chat);
    } else {
        FUZZ_CHECK(e.status == 400 || e.status == 404 || e.status == 500);
        FUZZ_CHECK(e.message[0] != '\0');
        FUZZ_CHECK(memchr(e.message, 0, sizeof e.message) && memchr(e.param, 0, sizeof e.param));
    }
    gen_req_fini(&g);
    json_decref(body);
    return 0;
}
