/* tok_spm.c — SentencePiece BPE-by-score, as llama.cpp's llm_tokenizer_spm.
 *
 * The text is normalized (' ' → "▁", optional "▁" prefix), cut into UTF-8 characters, and the
 * adjacent pair whose concatenation is a vocabulary token with the highest score is merged until
 * no pair is a token (ties: leftmost). Candidate pairs sit in a max-heap; a popped pair whose
 * symbols changed since it was pushed is stale and skipped, so the whole is O(n log n).
 * Symbols that are not tokens (single characters) become byte tokens <0xXX>, or unk. */
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"
#include "tok_internal.h"

#define TOK_SPM_SPACE "\xe2\x96\x81" /* U+2581 "▁" */
#define TOK_SPM_SPACE_LEN 3

struct tok_spm_ctx {
    const struct pi_tokenizer *t;
    const char *text; /* normalized */
    struct tok_sym *sym;
    struct tok_heap heap;
};

/* Queue the merge of symbols left and right if their concatenation is a token. */
static int tok_spm_try_pair(struct tok_spm_ctx *c, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return 0;
    /* adjacent symbols are contiguous in the text */
    size_t size = c->sym[left].n + c->sym[right].n;
    int32_t id = tok_map_get(&c->t->vocab, c->text + c->sym[left].off, size);
    if (id < 0)
        return 0;
    struct tok_bigram b = {.left = left, .right = right, .prio = c->t->scores[id], .size = size};
    return tok_heap_push(&c->heap, &b);
}

/* Emit one final symbol: its token, or its bytes. */
static int tok_spm_emit(const struct tok_spm_ctx *c, const struct tok_sym *s, struct tok_ids *out)
{
    const struct pi_tokenizer *t = c->t;
    int32_t id = tok_map_get(&t->vocab, c->text + s->off, s->n);
    if (id >= 0)
        return tok_ids_push(out, id);
    for (size_t i = 0; i < s->n; i++) {
        int32_t b = t->byte_tok[(uint8_t)c->text[s->off + i]];
        int rc;
        if (b < 0)
            b = t->unk;
        if (b >= 0 && (rc = tok_ids_push(out, b)) < 0)
            return rc;
    }
    return 0;
}

int tok_spm_encode(const struct pi_tokenizer *t, const char *text, size_t len, bool add_prefix,
                   struct tok_ids *out)
{
    struct tok_spm_ctx c = {.t = t};
    char *norm = NULL;
    size_t n_space = 0, nlen = 0, n_sym = 0;
    int rc = 0;

    for (size_t i = 0; i < len; i++)
        n_space += text[i] == ' ';
    size_t cap = len + n_space * (TOK_SPM_SPACE_LEN - 1) + (add_prefix ? TOK_SPM_SPACE_LEN : 0);
    if (cap == 0)
        return 0;
    if (cap > INT32_MAX) /* symbol links are int32 */
        return pi_fail(PI_E_RANGE, "tokenizer: fragment of %zu bytes too long", len);
    if (!(norm = malloc(cap)) || !(c.sym = malloc(cap * sizeof *c.sym))) {
        rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory for a %zu-byte fragment", len);
        goto fail;
    }
    if (add_prefix) {
        memcpy(norm, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN);
        nlen = TOK_SPM_SPACE_LEN;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(norm + nlen, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN);
            nlen += TOK_SPM_SPACE_LEN;
        } else {
            norm[nlen++] = text[i];
        }
    }
    c.text = norm;

    /* One symbol per UTF-8 character. llama.cpp takes the length from the first byte alone; an
     * invalid byte is its own symbol here instead, so that it cannot swallow the "▁" of a following
     * space (which would then decode as "▁"). Valid UTF-8 splits the same either way. */
    for (size_t off = 0; off < nlen; n_sym++) {
        int32_t cp;
        size_t n = tok_utf8_decode(norm + off, nlen - off, &cp);
        c.sym[n_sym] = (struct tok_sym){.prev = (int32_t)n_sym - 1, .next = (int32_t)n_sym + 1, .off = off, .n = n};
        off += n;
    }
    c.sym[n_sym - 1].next = -1;
    for (size_t i = 1; i < n_sym; i++)
        if ((rc = tok_spm_try_pair(&c, (int32_t)i - 1, (int32_t)i)) < 0)
            goto fail;

    struct tok_bigram b;
    while (tok_heap_pop(&c.heap, &b)) {
        struct tok_sym *l = &c.sym[b.left], *r = &c.sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: one side was merged since */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            c.sym[r->next].prev = b.left;
        if ((rc = tok_spm_try_pair(&c, l->prev, b.left)) < 0 || (rc = tok_spm_try_pair(&c, b.left, l->next)) < 0)
            goto fail;
    }
    for (int32_t i = 0; i >= 0; i = c.sym[i].next)
        if ((rc = tok_spm_emit(&c, &c.sym[i], out)) < 0)
            goto fail;
fail:
    tok_heap_fini(&c.heap);
    free(c.sym);
    free(norm);
    return rc;
}
