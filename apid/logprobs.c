/* logprobs.c — OpenAI's logprobs objects from the engine's records (see logprobs.h). */
#include "logprobs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"
#include "textout.h"

#define LP_FLOOR (-9999.0)   /* OpenAI's value for a token the model rules out */
#define LP_PIECE_MAX 256     /* bytes of one token's text kept (longer ones are cut) */

void lp_fini(struct lp_list *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

int lp_add(struct lp_list *l, int32_t id, size_t offset, const struct pi_logprob *rec)
{
    if (l->n == l->cap) {
        const size_t cap = l->cap ? l->cap * 2 : 64;
        struct lp_entry *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return pi_fail(PI_E_NOMEM, "log-probabilities");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = (struct lp_entry){ .id = id, .offset = offset, .rec = *rec };
    if (l->v[l->n].rec.n_top < 0 || l->v[l->n].rec.n_top > PI_LP_MAX_TOP)
        l->v[l->n].rec.n_top = 0; /* from shared memory: never trust a count */
    l->n++;
    return 0;
}

static double lp_value(float x) { return isfinite(x) ? (double)x : LP_FLOOR; }

/* The token's bytes (*len of them) into raw, and its valid-UTF-8 text into text. */
static void token_text(const struct pi_tokenizer *tok, int32_t id, char *raw, size_t *len, char *text, size_t tcap)
{
    int n = tok_piece(tok, id, true, raw, LP_PIECE_MAX);
    *len = n < 0 ? 0 : (size_t)n < LP_PIECE_MAX ? (size_t)n : LP_PIECE_MAX;
    textout_utf8_copy(raw, *len, text, tcap);
}

/* {"token": T, "logprob": X, "bytes": [...]} */
static json_t *token_obj(const struct pi_tokenizer *tok, int32_t id, float logprob)
{
    char raw[LP_PIECE_MAX], text[3 * LP_PIECE_MAX + 1];
    size_t len;
    token_text(tok, id, raw, &len, text, sizeof text);
    json_t *bytes = json_array();
    for (size_t i = 0; bytes && i < len; i++)
        json_array_append_new(bytes, json_integer((unsigned char)raw[i]));
    return json_pack("{s:s, s:f, s:o}", "token", text, "logprob", lp_value(logprob), "bytes", bytes);
}

static json_t *chat_entry(const struct pi_tokenizer *tok, const struct lp_entry *e)
{
    json_t *top = json_array();
    for (int32_t k = 0; top && k < e->rec.n_top; k++)
        json_array_append_new(top, token_obj(tok, e->rec.top_id[k], e->rec.top_logprob[k]));
    json_t *o = token_obj(tok, e->id, e->rec.logprob);
    if (o && top)
        json_object_set_new(o, "top_logprobs", top);
    else
        json_decref(top);
    return o;
}

size_t lp_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n && s[i]; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80; /* not a continuation byte */
    return c;
}

json_t *lp_json(const struct pi_tokenizer *tok, bool chat, const struct lp_list *l, size_t from, size_t to,
                const char *text, size_t base)
{
    if (chat) {
        json_t *content = json_array();
        for (size_t i = from; content && i < to; i++)
            json_array_append_new(content, chat_entry(tok, &l->v[i]));
        return content ? json_pack("{s:o, s:n}", "content", content, "refusal") : NULL;
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    char raw[LP_PIECE_MAX], s[3 * LP_PIECE_MAX + 1];
    size_t len;
    for (size_t i = from; tokens && lps && tops && offs && i < to; i++) {
        const struct lp_entry *e = &l->v[i];
        token_text(tok, e->id, raw, &len, s, sizeof s);
        json_array_append_new(tokens, json_string(s));
        json_array_append_new(lps, json_real(lp_value(e->rec.logprob)));
        json_t *d = json_object();
        for (int32_t k = 0; d && k < e->rec.n_top; k++) {
            token_text(tok, e->rec.top_id[k], raw, &len, s, sizeof s);
            if (!json_object_get(d, s)) /* two tokens with the same text: the likelier one stays */
                json_object_set_new(d, s, json_real(lp_value(e->rec.top_logprob[k])));
        }
        json_array_append_new(tops, d);
        json_array_append_new(offs, json_integer((json_int_t)(base + lp_chars(text, e->offset))));
    }
    if (!tokens || !lps || !tops || !offs) {
        json_decref(tokens), json_decref(lps), json_decref(tops), json_decref(offs);
        return NULL;
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}
