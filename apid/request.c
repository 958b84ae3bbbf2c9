/* request.c — an OpenAI completion request (chat or text), checked field by field, as the fields of
 * the supervisor's generate command. Unknown fields are ignored (OpenAI clients send many); a known
 * field of the wrong type or range, and a feature not supported yet, is a 400 naming the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apid.h"
#include "model.h"
#include "pi_err.h"
#include "tokenizer.h"

/* OpenAI's ranges, where it has them. */
#define TEMP_MAX 2.0
#define PENALTY_ABS_MAX 2.0
#define REPEAT_PENALTY_MIN 0.01
#define REPEAT_PENALTY_MAX 100.0
#define TOP_K_MAX (1 << 30)

static int bad(struct apid_err *e, const char *param, const char *fmt, const char *what)
{
    apid_err_set(e, 400, param, "invalid_type", fmt, param, what);
    return -1;
}

/* 0 absent (or JSON null: clients send null for "default"), 1 taken, -1 error set. */
static int num_field(json_t *b, const char *k, double lo, double hi, double *out, struct apid_err *e)
{
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return bad(e, k, "'%s' must be %s", "a number");
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        apid_err_set(e, 400, k, "invalid_value", "'%s' must be between %g and %g, got %g", k, lo, hi, d);
        return -1;
    }
    *out = d;
    return 1;
}

static int int_field(json_t *b, const char *k, long long lo, long long hi, long long *out, struct apid_err *e)
{
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return bad(e, k, "'%s' must be %s", "an integer");
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        apid_err_set(e, 400, k, "invalid_value", "'%s' must be between %lld and %lld, got %lld", k, lo, hi, x);
        return -1;
    }
    *out = x;
    return 1;
}

static int bool_field(json_t *b, const char *k, bool *out, struct apid_err *e)
{
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(e, k, "'%s' must be %s", "true or false");
    *out = json_is_true(v);
    return 1;
}

static int unsupported(struct apid_err *e, const char *param, const char *what)
{
    apid_err_set(e, 400, param, "unsupported_parameter", "'%s': %s is not supported yet", param, what);
    return -1;
}

/* Features refused rather than silently ignored: their absence would change the answer. */
static int check_unsupported(json_t *b, bool chat, struct apid_err *e)
{
    long long n = 1;
    if (int_field(b, "n", 1, 128, &n, e) < 0)
        return -1;
    if (n != 1)
        return unsupported(e, "n", "more than one choice per request");
    static const char *const refused[] = { "tools", "functions", "tool_choice", "function_call", NULL };
    for (const char *const *k = refused; *k; k++) {
        json_t *v = json_object_get(b, *k);
        if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0) &&
            !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
            return unsupported(e, *k, "tool and function calling");
    }
    json_t *rf = json_object_get(b, "response_format");
    if (rf && !json_is_null(rf)) {
        const char *t = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !t || strcmp(t, "text"))
            return unsupported(e, "response_format", "a response format other than {\"type\":\"text\"}");
    }
    json_t *lb = json_object_get(b, "logit_bias");
    if (lb && !json_is_null(lb) && !(json_is_object(lb) && json_object_size(lb) == 0))
        return unsupported(e, "logit_bias", "a logit bias");
    bool echo = false;
    if (bool_field(b, "echo", &echo, e) < 0)
        return -1;
    if (echo)
        return unsupported(e, "echo", "echoing the prompt");
    json_t *sfx = json_object_get(b, "suffix");
    if (sfx && !json_is_null(sfx))
        return unsupported(e, "suffix", "a suffix (fill in the middle)");
    long long best_of = 1;
    if (int_field(b, "best_of", 1, 128, &best_of, e) < 0)
        return -1;
    if (best_of != 1)
        return unsupported(e, "best_of", "more than one candidate");
    return 0;
}

/* chat: logprobs (true/false) and top_logprobs (0..20, only with logprobs); text completions: the
 * legacy logprobs (0..20 candidates). Log-probabilities are recorded for at most PI_LP_MAX_TOKENS
 * generated tokens, so max_tokens is bounded with them. */
static int take_logprobs(json_t *b, bool chat, struct gen_req *g, struct apid_err *e)
{
    long long n = -1;
    g->n_probs = -1;
    if (chat) {
        bool on = false;
        long long top = -1;
        if (bool_field(b, "logprobs", &on, e) < 0 || int_field(b, "top_logprobs", 0, PI_LP_MAX_TOP, &top, e) < 0)
            return -1;
        if (top >= 0 && !on) {
            apid_err_set(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' requires 'logprobs': true");
            return -1;
        }
        n = on ? (top > 0 ? top : 0) : -1;
    } else if (int_field(b, "logprobs", 0, PI_LP_MAX_TOP, &n, e) < 0) {
        return -1;
    }
    if (n >= 0 && g->max_tokens > PI_LP_MAX_TOKENS) {
        const char *k = json_object_get(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
        apid_err_set(e, 400, k, "invalid_value", "with 'logprobs', '%s' must be at most %d, got %d", k,
                     PI_LP_MAX_TOKENS, g->max_tokens);
        return -1;
    }
    g->n_probs = (int)n;
    return 0;
}

/* A message's content: a string, or an array of {"type":"text","text":S} parts (joined). */
static int message_text(json_t *c, size_t i, char **out, struct apid_err *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (json_is_string(c)) {
        *out = strdup(json_string_value(c));
        return *out ? 0 : -1;
    }
    if (!json_is_array(c)) {
        apid_err_set(e, 400, param, "invalid_type", "'%s' must be a string or an array of text parts", param);
        return -1;
    }
    size_t len = 0, j;
    json_t *part;
    json_array_foreach(c, j, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *t = json_object_get(part, "text");
        if (!type || strcmp(type, "text")) {
            apid_err_set(e, 400, param, "unsupported_parameter", "'%s[%zu]': only text parts are supported (got %s)",
                         param, j, type ? type : "no type");
            return -1;
        }
        if (!json_is_string(t)) {
            apid_err_set(e, 400, param, "invalid_type", "'%s[%zu].text' must be a string", param, j);
            return -1;
        }
        len += json_string_length(t);
    }
    char *s = malloc(len + 1);
    if (!s)
        return -1;
    size_t off = 0;
    json_array_foreach(c, j, part) {
        json_t *t = json_object_get(part, "text");
        memcpy(s + off, json_string_value(t), json_string_length(t));
        off += json_string_length(t);
    }
    s[off] = '\0';
    *out = s;
    return 0;
}

static int render_messages(struct apid *a, json_t *msgs, struct gen_req *g, struct apid_err *e)
{
    if (!msgs) {
        apid_err_set(e, 400, "messages", "missing_required_parameter", "'messages' is required");
        return -1;
    }
    if (!json_is_array(msgs)) {
        apid_err_set(e, 400, "messages", "invalid_type", "'messages' must be an array");
        return -1;
    }
    const size_t n = json_array_size(msgs);
    if (n == 0) {
        apid_err_set(e, 400, "messages", "invalid_value", "'messages' must not be empty");
        return -1;
    }
    struct chat_msg *cm = calloc(n, sizeof *cm);
    char **texts = calloc(n, sizeof *texts);
    int rc = -1;
    if (!cm || !texts) {
        apid_err_set(e, 500, NULL, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            apid_err_set(e, 400, param, "invalid_type", "'%s' must be an object", param);
            goto out;
        }
        const char *role = json_string_value(json_object_get(m, "role"));
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!role) {
            apid_err_set(e, 400, param, "invalid_type", "'%s' (a string) is required", param);
            goto out;
        }
        if (!strcmp(role, "tool") || !strcmp(role, "function")) {
            apid_err_set(e, 400, param, "unsupported_parameter", "'%s': %s messages are not supported yet", param,
                         role);
            goto out;
        }
        if (strcmp(role, "system") && strcmp(role, "developer") && strcmp(role, "user") && strcmp(role, "assistant")) {
            apid_err_set(e, 400, param, "invalid_value",
                         "'%s' must be system, developer, user or assistant, got '%.32s'", param, role);
            goto out;
        }
        json_t *c = json_object_get(m, "content");
        if (!c) {
            snprintf(param, sizeof param, "messages[%zu].content", i);
            apid_err_set(e, 400, param, "missing_required_parameter", "'%s' is required", param);
            goto out;
        }
        if (message_text(c, i, &texts[i], e))
            goto out;
        cm[i] = (struct chat_msg){ .role = role, .content = texts[i] };
    }
    if (chat_render(a->family, cm, n, &g->prompt)) {
        apid_err_set(e, 400, "messages", "invalid_value", "%s", pi_errmsg());
        goto out;
    }
    rc = 0;
out:
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(cm);
    return rc;
}

/* A prompt of token ids, each checked against the vocabulary. */
static int take_prompt_ids(struct apid *a, json_t *p, struct gen_req *g, struct apid_err *e)
{
    const size_t n = json_array_size(p);
    const int32_t n_vocab = tok_n_vocab(a->model->tok);
    if (n > PI_REQ_MAX_TOKENS) {
        apid_err_set(e, 400, "prompt", "context_length_exceeded", "'prompt' has %zu token ids; a request holds at most %d",
                     n, PI_REQ_MAX_TOKENS);
        return -1;
    }
    if (!(g->prompt_ids = malloc(n * sizeof *g->prompt_ids))) {
        apid_err_set(e, 500, NULL, NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(p, i);
        const json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= n_vocab) {
            char param[32];
            snprintf(param, sizeof param, "prompt[%zu]", i);
            if (!json_is_integer(v))
                apid_err_set(e, 400, "prompt", "invalid_type", "'%s' must be a token id (an integer)", param);
            else
                apid_err_set(e, 400, "prompt", "invalid_value", "'%s' = %lld is not a token id of this model (0..%d)",
                             param, (long long)id, n_vocab - 1);
            return -1;
        }
        g->prompt_ids[i] = (int32_t)id;
    }
    g->n_prompt_ids = n;
    return 0;
}

static int take_prompt(struct apid *a, json_t *p, struct gen_req *g, struct apid_err *e)
{
    if (!p) {
        apid_err_set(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
        return -1;
    }
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    /* [[ids]]: one prompt of token ids, as OpenAI allows a batch of them */
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_array(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_array(p)) {
        json_t *first = json_array_get(p, 0);
        if (!first) {
            apid_err_set(e, 400, "prompt", "invalid_value", "'prompt' must not be empty");
            return -1;
        }
        if (json_is_integer(first))
            return take_prompt_ids(a, p, g, e);
        if (json_is_array(first) || json_is_string(first))
            return unsupported(e, "prompt", "more than one prompt per request");
        apid_err_set(e, 400, "prompt", "invalid_type",
                     "'prompt' must be a string, an array of token ids, or one of either in an array");
        return -1;
    }
    if (!json_is_string(p)) {
        apid_err_set(e, 400, "prompt", "invalid_type", "'prompt' must be a string");
        return -1;
    }
    if (json_string_length(p) == 0) {
        apid_err_set(e, 400, "prompt", "invalid_value", "'prompt' must not be empty");
        return -1;
    }
    g->prompt = strdup(json_string_value(p));
    return g->prompt ? 0 : -1;
}

static int take_stops(json_t *b, struct gen_req *g, struct apid_err *e)
{
    json_t *s = json_object_get(b, "stop");
    if (!s || json_is_null(s))
        return 0;
    if (json_is_string(s)) {
        if (json_string_length(s) == 0)
            return 0;
        g->stops[g->n_stops++] = strdup(json_string_value(s));
        return 0;
    }
    if (!json_is_array(s)) {
        apid_err_set(e, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
        return -1;
    }
    if (json_array_size(s) > sizeof g->stops / sizeof g->stops[0]) {
        apid_err_set(e, 400, "stop", "invalid_value", "'stop' holds at most %zu strings",
                     sizeof g->stops / sizeof g->stops[0]);
        return -1;
    }
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v) {
        if (!json_is_string(v)) {
            apid_err_set(e, 400, "stop", "invalid_type", "'stop[%zu]' must be a string", i);
            return -1;
        }
        if (json_string_length(v) > 0)
            g->stops[g->n_stops++] = strdup(json_string_value(v));
    }
    return 0;
}

int apid_parse_gen(struct apid *a, json_t *b, bool chat, struct gen_req *g, struct apid_err *e)
{
    memset(g, 0, sizeof *g);
    g->chat = chat;
    g->max_tokens = -1;
    g->n_probs = -1;
    if (!json_is_object(b)) {
        apid_err_set(e, 400, NULL, "invalid_request", "the request body must be a JSON object");
        return -1;
    }
    json_t *model = json_object_get(b, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return bad(e, "model", "'%s' must be %s", "a string");
        const char *m = json_string_value(model);
        if (strcmp(m, a->model_id) && (!a->cfg.model_alias[0] || strcmp(m, a->cfg.model_alias))) {
            apid_err_set(e, 404, "model", "model_not_found", "the model '%.128s' does not exist (this server has '%s')",
                         m, a->model_id);
            return -1;
        }
    }
    if (check_unsupported(b, chat, e))
        return -1;
    if (bool_field(b, "stream", &g->stream, e) < 0)
        return -1;
    json_t *so = json_object_get(b, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return bad(e, "stream_options", "'%s' must be %s", "an object");
        if (!g->stream) {
            apid_err_set(e, 400, "stream_options", "invalid_value", "'stream_options' is only allowed with 'stream': true");
            return -1;
        }
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return bad(e, "stream_options.include_usage", "'%s' must be %s", "true or false");
        g->include_usage = json_is_true(iu);
    }
    double temp = -1, top_p = -1, min_p = -1, rp = -1, pres = 0, freq = 0;
    long long top_k = -1, mt = -1, mct = -1, seed = 0;
    bool has_seed = false, ignore_eos = false;
    const long long max_tok = a->rt.ctl ? a->rt.ctl->n_ctx : PI_REQ_MAX_TOKENS;
    if (num_field(b, "temperature", 0, TEMP_MAX, &temp, e) < 0 || num_field(b, "top_p", 0, 1, &top_p, e) < 0 ||
        num_field(b, "min_p", 0, 1, &min_p, e) < 0 ||
        num_field(b, "repeat_penalty", REPEAT_PENALTY_MIN, REPEAT_PENALTY_MAX, &rp, e) < 0 ||
        num_field(b, "presence_penalty", -PENALTY_ABS_MAX, PENALTY_ABS_MAX, &pres, e) < 0 ||
        num_field(b, "frequency_penalty", -PENALTY_ABS_MAX, PENALTY_ABS_MAX, &freq, e) < 0 ||
        int_field(b, "top_k", 0, TOP_K_MAX, &top_k, e) < 0 || int_field(b, "max_tokens", 1, max_tok, &mt, e) < 0 ||
        int_field(b, "max_completion_tokens", 1, max_tok, &mct, e) < 0 || bool_field(b, "ignore_eos", &ignore_eos, e) < 0)
        return -1;
    json_t *sv = json_object_get(b, "seed");
    if (sv && !json_is_null(sv)) {
        if (!json_is_integer(sv))
            return bad(e, "seed", "'%s' must be %s", "an integer");
        seed = json_integer_value(sv);
        has_seed = true;
    }
    g->max_tokens = (int32_t)(mct > 0 ? mct : mt);
    if (take_logprobs(b, chat, g, e))
        return -1;
    if (take_stops(b, g, e))
        return -1;
    if (chat ? render_messages(a, json_object_get(b, "messages"), g, e) : take_prompt(a, json_object_get(b, "prompt"), g, e))
        return -1;
    if (!(g->engine = json_object()))
        return -1;
    if (g->prompt_ids) {
        json_t *ids = json_array();
        for (size_t i = 0; ids && i < g->n_prompt_ids; i++)
            json_array_append_new(ids, json_integer(g->prompt_ids[i]));
        json_object_set_new(g->engine, "prompt_tokens", ids);
    } else {
        json_object_set_new(g->engine, "prompt", json_string(g->prompt));
    }
    if (pres != 0)
        json_object_set_new(g->engine, "presence_penalty", json_real(pres));
    if (freq != 0)
        json_object_set_new(g->engine, "frequency_penalty", json_real(freq));
    if (g->n_probs >= 0)
        json_object_set_new(g->engine, "logprobs", json_integer(g->n_probs));
    if (temp >= 0)
        json_object_set_new(g->engine, "temp", json_real(temp));
    if (top_p >= 0)
        json_object_set_new(g->engine, "top_p", json_real(top_p));
    if (min_p >= 0)
        json_object_set_new(g->engine, "min_p", json_real(min_p));
    if (rp >= 0)
        json_object_set_new(g->engine, "repeat_penalty", json_real(rp));
    if (top_k >= 0)
        json_object_set_new(g->engine, "top_k", json_integer(top_k));
    if (has_seed) {
        /* the supervisor takes a u64: a negative seed is its two's complement, as a decimal string */
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)seed);
        json_object_set_new(g->engine, "seed", json_string(buf));
    }
    if (ignore_eos)
        json_object_set_new(g->engine, "ignore_eos", json_true());
    json_object_set_new(g->engine, "client_pid", json_integer((json_int_t)getpid()));
    return 0;
}

void gen_req_fini(struct gen_req *g)
{
    free(g->prompt);
    free(g->prompt_ids);
    json_decref(g->engine);
    for (size_t i = 0; i < g->n_stops; i++)
        free(g->stops[i]);
    memset(g, 0, sizeof *g);
}
