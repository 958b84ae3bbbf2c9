/* logprobs.h — OpenAI's log-probability objects, built from the engine's per-token records
 * (struct pi_logprob, ipc/pipeline_layout.h: computed by gpud from the distribution the token was
 * sampled from, common/sampling.h):
 *   chat:  {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
 *          "bytes"}]}], "refusal": null}
 *   text:  {"tokens": [], "token_logprobs": [], "top_logprobs": [{token: logprob}], "text_offset": []}
 *          (text_offset: characters from the start of the prompt to the token's text)
 * A token's "token" is its text (control tokens by name), made valid UTF-8 (U+FFFD for a byte
 * that is part of a character); "bytes" are its exact bytes. A log-probability of -infinity (a
 * banned token) is written as -9999.0, OpenAI's floor, since JSON has no infinity. */
#ifndef PI_APID_LOGPROBS_H
#define PI_APID_LOGPROBS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline_layout.h"
#include "tokenizer.h"

struct lp_entry {
    int32_t id;                /* the generated token */
    size_t offset;             /* byte offset of its text in the answer */
    struct pi_logprob rec;
};

/* The entries of one answer, in order; `sent` counts those already streamed. */
struct lp_list {
    struct lp_entry *v;
    size_t n, cap, sent;
};

void lp_fini(struct lp_list *l);
/* Append a copy of rec. 0 or -PI_E_NOMEM. */
int lp_add(struct lp_list *l, int32_t id, size_t offset, const struct pi_logprob *rec);
/* Entries [from, to) as chat's or the text completions' object. text: the answer so far; base: the
 * prompt's length in characters (text_offset counts characters from the start of the prompt, as
 * OpenAI's does, echo or not). NULL on out of memory. */
json_t *lp_json(const struct pi_tokenizer *tok, bool chat, const struct lp_list *l, size_t from, size_t to,
                const char *text, size_t base);
/* Characters (UTF-8 sequences) in s[0..n), or up to its NUL. */
size_t lp_chars(const char *s, size_t n);

#endif
