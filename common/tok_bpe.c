/* tok_bpe.c — byte-level BPE (GPT-2 style), as llama.cpp's llm_tokenizer_bpe.
 *
 * 1. Pre-tokenize: the regexes of the named pre-tokenizer (PCRE2, UTF + UCP) cut the text into
 *    words; text between matches (e.g. invalid UTF-8, which never matches) is kept as its own word,
 *    so every byte survives.
 * 2. Each word's bytes are mapped to GPT-2's printable alphabet (bytes_to_unicode), one symbol per
 *    byte, and adjacent pairs are merged lowest merge rank first (ties: leftmost) through a heap.
 * 3. Every final symbol is looked up as a token; one that is not falls back to per-byte tokens. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"
#include "tok_internal.h"

#define TOK_BPE_MAX_RE 4
#define TOK_BPE_MAX_NAMES 4
#define TOK_BPE_N_CP 324 /* bytes_to_unicode maps into code points 0x21..0x143 */
#define TOK_BPE_CP_SHIFT 256 /* first code point given to a non-printable byte */
#define TOK_BPE_CP_MAX_UTF8 2 /* every alphabet code point is < 0x800 */
#define TOK_PCRE2_ERR_LEN 256

/* Regexes as llama.cpp (llama-vocab.cpp) uses them for each tokenizer.ggml.pre name. */
#define TOK_RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define TOK_RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define TOK_RE_LLAMA3                                                                                        \
    TOK_RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
                        "\\s+(?!\\S)|\\s+"
#define TOK_RE_QWEN2                                                                                      \
    TOK_RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
                        "\\s+(?!\\S)|\\s+"

struct tok_pre {
    const char *names[TOK_BPE_MAX_NAMES];
    const char *regex[TOK_BPE_MAX_RE]; /* applied in turn, each cutting the previous words */
    bool ignore_merges;                /* a word that is already a token is not merged (llama3) */
};

static const struct tok_pre tok_pres[] = {
    {{"default", "gpt2", "gpt-2"}, {TOK_RE_GPT2}, false},
    {{"llama-bpe", "llama3", "llama-v3"}, {TOK_RE_LLAMA3}, true},
    {{"qwen2"}, {TOK_RE_QWEN2}, false},
};

struct tok_bpe {
    const struct tok_pre *pre;
    pcre2_code *re[TOK_BPE_MAX_RE];
    size_t n_re;
    char *merge_blob;      /* merge strings "a b", NUL-separated: keys of ranks */
    struct tok_map ranks;  /* "a b" → rank (first occurrence wins) */
    uint16_t byte_cp[TOK_N_BYTES];
    int16_t cp_byte[TOK_BPE_N_CP]; /* -1: not in the alphabet */
};

static const struct tok_pre *tok_pre_find(const char *name)
{
    for (size_t i = 0; i < sizeof tok_pres / sizeof tok_pres[0]; i++)
        for (size_t j = 0; j < TOK_BPE_MAX_NAMES && tok_pres[i].names[j]; j++)
            if (strcmp(tok_pres[i].names[j], name) == 0)
                return &tok_pres[i];
    return NULL;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others get
 * 256, 257, ... in byte order, so that every byte is a visible character. */
static void tok_bpe_alphabet(struct tok_bpe *b)
{
    uint32_t next = TOK_BPE_CP_SHIFT;
    for (int i = 0; i < TOK_BPE_N_CP; i++)
        b->cp_byte[i] = -1;
    for (int c = 0; c < TOK_N_BYTES; c++) {
        bool printable = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff);
        b->byte_cp[c] = (uint16_t)(printable ? (uint32_t)c : next++);
        b->cp_byte[b->byte_cp[c]] = (int16_t)c;
    }
}

void tok_bpe_free(struct tok_bpe *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n_re; i++)
        pcre2_code_free(b->re[i]);
    tok_map_fini(&b->ranks);
    free(b->merge_blob);
    free(b);
}

int tok_bpe_new(struct pi_tokenizer *t, const char *pre, const char *const *merges, size_t n_merges)
{
    struct tok_bpe *b = NULL;
    const char *name = pre ? pre : "default";
    size_t blob_len = 0;
    int rc;

    const struct tok_pre *p = tok_pre_find(name);
    if (!p)
        return pi_fail(PI_E_UNSUPPORTED, "tokenizer: unsupported pre-tokenizer '%s' (tokenizer.ggml.pre)", name);
    if (n_merges > INT32_MAX)
        return pi_fail(PI_E_FORMAT, "tokenizer: %zu merges", n_merges);
    if (!(b = calloc(1, sizeof *b)))
        return pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
    b->pre = p;
    tok_bpe_alphabet(b);

    for (size_t i = 0; i < TOK_BPE_MAX_RE && p->regex[i]; i++) {
        int err;
        PCRE2_SIZE err_off;
        /* MATCH_INVALID_UTF: arbitrary bytes are allowed in the subject; invalid ones never match */
        b->re[i] = pcre2_compile((PCRE2_SPTR)p->regex[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, NULL);
        if (!b->re[i]) {
            PCRE2_UCHAR msg[TOK_PCRE2_ERR_LEN];
            pcre2_get_error_message(err, msg, sizeof msg);
            rc = pi_fail(PI_E_UNSUPPORTED, "tokenizer: pre-tokenizer '%s' regex %zu: %s at offset %zu", name, i,
                         (const char *)msg, (size_t)err_off);
            goto fail;
        }
        b->n_re++;
        pcre2_jit_compile(b->re[i], PCRE2_JIT_COMPLETE); /* optional speed-up; the interpreter is the fallback */
    }

    for (size_t i = 0; i < n_merges; i++) {
        if (!merges[i]) {
            rc = pi_fail(PI_E_FORMAT, "tokenizer: merge %zu has no text", i);
            goto fail;
        }
        blob_len += strlen(merges[i]) + 1;
    }
    if (!(b->merge_blob = malloc(blob_len ? blob_len : 1))) {
        rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu merges", n_merges);
        goto fail;
    }
    if ((rc = tok_map_init(&b->ranks, n_merges)) < 0)
        goto fail;
    for (size_t i = 0, off = 0; i < n_merges; i++) {
        size_t len = strlen(merges[i]);
        /* as llama.cpp: the separator is the first space after the first character */
        const char *sp = len > 1 ? memchr(merges[i] + 1, ' ', len - 1) : NULL;
        if (!sp || sp == merges[i] + len - 1) {
            rc = pi_fail(PI_E_FORMAT, "tokenizer: merge %zu '%.64s' is not \"left right\"", i, merges[i]);
            goto fail;
        }
        char *s = b->merge_blob + off;
        memcpy(s, merges[i], len + 1);
        if ((rc = tok_map_put(&b->ranks, s, len, (int32_t)i, false)) < 0)
            goto fail;
        off += len + 1;
    }

    for (int c = 0; c < TOK_N_BYTES; c++) {
        char u[4];
        size_t n = tok_utf8_encode(b->byte_cp[c], u);
        t->byte_tok[c] = tok_map_get(&t->vocab, u, n);
    }
    t->bpe = b;
    return 0;
fail:
    tok_bpe_free(b);
    return rc;
}

size_t tok_bpe_unmap(const struct tok_bpe *b, const char *s, size_t n, char *buf, size_t cap)
{
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t l = tok_utf8_decode(s + i, n - i, &cp);
        if (cp >= 0 && cp < TOK_BPE_N_CP && b->cp_byte[cp] >= 0) {
            if (out < cap)
                buf[out] = (char)b->cp_byte[cp];
            out++;
        } else { /* not from the alphabet (e.g. an added token): as is */
            for (size_t k = 0; k < l; k++, out++)
                if (out < cap)
                    buf[out] = s[i + k];
        }
        i += l;
    }
    return out;
}

/* ---- pre-tokenization ---- */

struct tok_span {
    size_t off, len;
};
struct tok_spans {
    struct tok_span *v;
    size_t n, cap;
};

static int tok_spans_push(struct tok_spans *a, size_t off, size_t len)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        struct tok_span *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu words", cap);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (struct tok_span){off, len};
    return 0;
}

/* Cut text[s.off, s.off + s.len) at the matches of re: each match is a word, and so is each gap. The
 * span is the whole subject, as in llama.cpp, so lookaheads do not see past it. */
static int tok_regex_split(const pcre2_code *re, pcre2_match_data *md, const char *text, struct tok_span s,
                           struct tok_spans *out)
{
    const PCRE2_SPTR subj = (PCRE2_SPTR)(text + s.off);
    size_t gap = 0, pos = 0;
    int rc;
    while (pos < s.len) {
        int m = pcre2_match(re, subj, s.len, pos, 0, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[TOK_PCRE2_ERR_LEN];
            pcre2_get_error_message(m, msg, sizeof msg);
            return pi_fail(PI_E_RANGE, "tokenizer: pre-tokenizer match at byte %zu failed: %s", s.off + pos,
                           (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] <= ov[0]) { /* an empty match makes no progress: step over one byte into the gap */
            pos = ov[0] + 1;
            continue;
        }
        if (ov[0] > gap && (rc = tok_spans_push(out, s.off + gap, ov[0] - gap)) < 0)
            return rc;
        if ((rc = tok_spans_push(out, s.off + ov[0], ov[1] - ov[0])) < 0)
            return rc;
        gap = pos = ov[1];
    }
    if (gap < s.len && (rc = tok_spans_push(out, s.off + gap, s.len - gap)) < 0)
        return rc;
    return 0;
}

/* ---- merging ---- */

struct tok_bpe_ctx {
    const struct pi_tokenizer *t;
    const struct tok_bpe *b;
    char *word; /* byte-level encoded */
    struct tok_sym *sym;
    struct tok_heap heap;
};

static int tok_bpe_try_pair(struct tok_bpe_ctx *c, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return 0;
    const struct tok_sym *l = &c->sym[left], *r = &c->sym[right];
    int32_t rank = tok_map_get_pair(&c->b->ranks, c->word + l->off, l->n, c->word + r->off, r->n);
    if (rank < 0)
        return 0;
    struct tok_bigram bg = {.left = left, .right = right, .prio = -(double)rank, .size = l->n + r->n};
    return tok_heap_push(&c->heap, &bg);
}

/* A final symbol that is not a token: one token per byte it stands for (or unk). */
static int tok_bpe_emit_bytes(const struct tok_bpe_ctx *c, const char *s, size_t n, struct tok_ids *out)
{
    for (size_t i = 0; i < n;) {
        int32_t cp;
        i += tok_utf8_decode(s + i, n - i, &cp);
        int32_t id = cp >= 0 && cp < TOK_BPE_N_CP && c->b->cp_byte[cp] >= 0 ? c->t->byte_tok[c->b->cp_byte[cp]] : -1;
        if (id < 0)
            id = c->t->unk;
        int rc;
        if (id >= 0 && (rc = tok_ids_push(out, id)) < 0)
            return rc;
    }
    return 0;
}

/* BPE one word of raw bytes. */
static int tok_bpe_word(struct tok_bpe_ctx *c, const char *raw, size_t len, struct tok_ids *out)
{
    const struct pi_tokenizer *t = c->t;
    size_t wlen = 0;
    int rc;

    for (size_t i = 0; i < len; i++) {
        c->sym[i] = (struct tok_sym){.prev = (int32_t)i - 1, .next = (int32_t)i + 1, .off = wlen, .n = 0};
        c->sym[i].n = tok_utf8_encode(c->b->byte_cp[(uint8_t)raw[i]], c->word + wlen);
        wlen += c->sym[i].n;
    }
    c->sym[len - 1].next = -1;
    if (c->b->pre->ignore_merges) {
        int32_t id = tok_map_get(&t->vocab, c->word, wlen);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    c->heap.n = 0;
    for (size_t i = 1; i < len; i++)
        if ((rc = tok_bpe_try_pair(c, (int32_t)i - 1, (int32_t)i)) < 0)
            return rc;
    struct tok_bigram bg;
    while (tok_heap_pop(&c->heap, &bg)) {
        struct tok_sym *l = &c->sym[bg.left], *r = &c->sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
            continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            c->sym[r->next].prev = bg.left;
        if ((rc = tok_bpe_try_pair(c, l->prev, bg.left)) < 0 || (rc = tok_bpe_try_pair(c, bg.left, l->next)) < 0)
            return rc;
    }
    for (int32_t i = 0; i >= 0; i = c->sym[i].next) {
        const char *s = c->word + c->sym[i].off;
        int32_t id = tok_map_get(&t->vocab, s, c->sym[i].n);
        rc = id >= 0 ? tok_ids_push(out, id) : tok_bpe_emit_bytes(c, s, c->sym[i].n, out);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int tok_bpe_encode(const struct pi_tokenizer *t, const char *text, size_t len, struct tok_ids *out)
{
    const struct tok_bpe *b = t->bpe;
    struct tok_bpe_ctx c = {.t = t, .b = b};
    struct tok_spans cur = {0}, next = {0};
    pcre2_match_data *md = NULL;
    size_t max_len = 0;
    int rc;

    if (len == 0)
        return 0;
    if (len > INT32_MAX) /* symbol links are int32 */
        return pi_fail(PI_E_RANGE, "tokenizer: fragment of %zu bytes too long", len);
    if (!(md = pcre2_match_data_create(1, NULL))) { /* only the whole match is needed */
        rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory for regex match data");
        goto fail;
    }
    if ((rc = tok_spans_push(&cur, 0, len)) < 0)
        goto fail;
    for (size_t r = 0; r < b->n_re; r++) {
        next.n = 0;
        for (size_t i = 0; i < cur.n; i++)
            if ((rc = tok_regex_split(b->re[r], md, text, cur.v[i], &next)) < 0)
                goto fail;
        struct tok_spans tmp = cur;
        cur = next;
        next = tmp;
    }
    for (size_t i = 0; i < cur.n; i++)
        if (cur.v[i].len > max_len)
            max_len = cur.v[i].len;
    if (!(c.word = malloc(max_len * TOK_BPE_CP_MAX_UTF8)) || !(c.sym = malloc(max_len * sizeof *c.sym))) {
        rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory for a %zu-byte word", max_len);
        goto fail;
    }
    for (size_t i = 0; i < cur.n; i++)
        if ((rc = tok_bpe_word(&c, text + cur.v[i].off, cur.v[i].len, out)) < 0)
            goto fail;
fail:
    tok_heap_fini(&c.heap);
    free(c.word);
    free(c.sym);
    free(cur.v);
    free(next.v);
    pcre2_match_data_free(md);
    return rc;
}
