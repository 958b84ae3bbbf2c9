/* tokenizer.c — construction (from a descriptor or GGUF keys), special-token splitting, decoding,
 * and the parts tok_spm.c / tok_bpe.c share (hash map, merge heap, UTF-8).
 *
 * Encoding follows llama.cpp's llama_tokenize_impl: the text is first cut at special tokens
 * (longest special first, every occurrence), then each raw fragment goes to the model's
 * tokenizer on its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "pi_err.h"
#include "tok_internal.h"

/* ======================= hash map ======================= */

#define TOK_FNV_OFFSET 0xcbf29ce484222325ull
#define TOK_FNV_PRIME 0x100000001b3ull
#define TOK_MAP_MIN_SLOTS 16

static uint64_t tok_fnv(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * TOK_FNV_PRIME;
    return h;
}

int tok_map_init(struct tok_map *m, size_t n_expected)
{
    size_t cap = TOK_MAP_MIN_SLOTS;
    while (cap < 2 * n_expected) /* load factor ≤ 1/2 keeps probe chains short */
        cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots)
        return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for a %zu-slot map", cap);
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

void tok_map_fini(struct tok_map *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

int tok_map_put(struct tok_map *m, const char *key, size_t len, int32_t val, bool overwrite)
{
    if (len > UINT32_MAX)
        return pi_fail(PI_E_RANGE, "tokenizer: key of %zu bytes too long", len);
    if (2 * (m->n + 1) > m->mask + 1)
        return pi_fail(PI_E_RANGE, "tokenizer: map full (%zu keys)", m->n);
    uint64_t h = tok_fnv(TOK_FNV_OFFSET, key, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        struct tok_map_slot *s = &m->slots[i];
        if (!s->key) {
            *s = (struct tok_map_slot){.key = key, .len = (uint32_t)len, .val = val, .hash = h};
            m->n++;
            return 0;
        }
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            if (overwrite)
                s->val = val;
            return 0;
        }
    }
}

int32_t tok_map_get(const struct tok_map *m, const char *key, size_t len)
{
    uint64_t h = tok_fnv(TOK_FNV_OFFSET, key, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const struct tok_map_slot *s = &m->slots[i];
        if (!s->key)
            return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)
            return s->val;
    }
}

int32_t tok_map_get_pair(const struct tok_map *m, const char *a, size_t alen, const char *b, size_t blen)
{
    uint64_t h = tok_fnv(tok_fnv(tok_fnv(TOK_FNV_OFFSET, a, alen), " ", 1), b, blen);
    size_t len = alen + 1 + blen;
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const struct tok_map_slot *s = &m->slots[i];
        if (!s->key)
            return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, a, alen) == 0 && s->key[alen] == ' ' &&
            memcmp(s->key + alen + 1, b, blen) == 0)
            return s->val;
    }
}

/* ======================= merge heap ======================= */

static bool tok_bigram_before(const struct tok_bigram *a, const struct tok_bigram *b)
{
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

int tok_heap_push(struct tok_heap *h, const struct tok_bigram *b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        struct tok_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu merge candidates", cap);
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) { /* sift up */
        size_t p = (i - 1) / 2;
        if (!tok_bigram_before(b, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = *b;
    return 0;
}

bool tok_heap_pop(struct tok_heap *h, struct tok_bigram *out)
{
    if (h->n == 0)
        return false;
    *out = h->v[0];
    struct tok_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) { /* sift down */
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && tok_bigram_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!tok_bigram_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return true;
}

void tok_heap_fini(struct tok_heap *h)
{
    free(h->v);
    memset(h, 0, sizeof *h);
}

int tok_ids_push(struct tok_ids *a, int32_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu token ids", cap);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

/* ======================= UTF-8 ======================= */

size_t tok_utf8_decode(const char *s, size_t n, int32_t *cp)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t len;
    uint32_t c, min;
    if (u[0] < 0x80) {
        *cp = u[0];
        return 1;
    } else if ((u[0] & 0xe0) == 0xc0) {
        len = 2, c = u[0] & 0x1f, min = 0x80;
    } else if ((u[0] & 0xf0) == 0xe0) {
        len = 3, c = u[0] & 0x0f, min = 0x800;
    } else if ((u[0] & 0xf8) == 0xf0) {
        len = 4, c = u[0] & 0x07, min = 0x10000;
    } else {
        *cp = -1;
        return 1;
    }
    if (len > n) {
        *cp = -1;
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80) {
            *cp = -1;
            return 1;
        }
        c = (c << 6) | (u[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
        *cp = -1;
        return 1;
    }
    *cp = (int32_t)c;
    return len;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* ======================= construction ======================= */

/* Tokens that end generation besides EOS (chat/instruct models). */
static const char *const tok_eog_names[] = {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>"};

static bool tok_is_special_type(int32_t type)
{
    return type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED || type == TOK_TYPE_UNKNOWN;
}

/* Sort key for the special tokens: longest text first, then by id (deterministic). */
struct tok_special_key {
    uint32_t len;
    int32_t id;
};

static int tok_cmp_special(const void *a, const void *b)
{
    const struct tok_special_key *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Fill t->special with the splitting tokens in matching order. */
static int tok_collect_specials(struct pi_tokenizer *t)
{
    struct tok_special_key *keys = malloc((size_t)t->n_vocab * sizeof *keys);
    size_t n = 0;
    if (!keys)
        return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for special tokens");
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (tok_is_special_type(t->types[i]) && t->tok_len[i] > 0)
            keys[n++] = (struct tok_special_key){t->tok_len[i], i};
    qsort(keys, n, sizeof *keys, tok_cmp_special);
    for (size_t i = 0; i < n; i++)
        t->special[i] = keys[i].id;
    t->n_special = n;
    free(keys);
    return 0;
}

static int tok_check_id(const struct tok_vocab_desc *d, int32_t id, const char *name, int err)
{
    if (id < -1 || (id >= 0 && (size_t)id >= d->n_vocab))
        return pi_fail(err, "tokenizer: %s %d out of range for %zu tokens", name, id, d->n_vocab);
    return 0;
}

static int tok_add_eog(struct pi_tokenizer *t, int32_t id)
{
    if (id < 0)
        return 0;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 0;
    if (t->n_eog < TOK_MAX_EOG)
        t->eog[t->n_eog++] = id;
    return 0;
}

/* err: the code for a bad descriptor (PI_E_INVAL from a caller, PI_E_FORMAT from a file). */
static int tok_build(struct pi_tokenizer **out, const struct tok_vocab_desc *d, int err)
{
    struct pi_tokenizer *t = NULL;
    int rc;

    *out = NULL;
    if (d->kind != TOK_KIND_SPM && d->kind != TOK_KIND_BPE)
        return pi_fail(PI_E_UNSUPPORTED, "tokenizer: unknown kind %d", (int)d->kind);
    if (d->n_vocab == 0 || !d->tokens || d->n_vocab > INT32_MAX)
        return pi_fail(err, "tokenizer: vocabulary of %zu tokens%s", d->n_vocab, d->tokens ? "" : " without texts");
    if ((rc = tok_check_id(d, d->bos, "bos id", err)) < 0 || (rc = tok_check_id(d, d->eos, "eos id", err)) < 0 ||
        (rc = tok_check_id(d, d->unk, "unk id", err)) < 0 || (rc = tok_check_id(d, d->pad, "pad id", err)) < 0)
        return rc;
    if (d->n_merges && !d->merges)
        return pi_fail(err, "tokenizer: %zu merges without texts", d->n_merges);

    if (!(t = calloc(1, sizeof *t)))
        return pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
    t->kind = d->kind;
    t->n_vocab = (int32_t)d->n_vocab;
    t->bos = d->bos;
    t->eos = d->eos;
    t->unk = d->unk;
    t->pad = d->pad;
    t->add_bos = d->add_bos && d->bos >= 0;
    t->add_eos = d->add_eos && d->eos >= 0;
    t->add_space_prefix = d->add_space_prefix;

    size_t n = d->n_vocab, blob_len = 0;
    t->tok_off = malloc(n * sizeof *t->tok_off);
    t->tok_len = malloc(n * sizeof *t->tok_len);
    t->scores = malloc(n * sizeof *t->scores);
    t->types = malloc(n * sizeof *t->types);
    t->special = malloc(n * sizeof *t->special);
    if (!t->tok_off || !t->tok_len || !t->scores || !t->types || !t->special) {
        rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu tokens", n);
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (!d->tokens[i]) {
            rc = pi_fail(err, "tokenizer: token %zu has no text", i);
            goto fail;
        }
        size_t len = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
        if (len > UINT32_MAX) {
            rc = pi_fail(err, "tokenizer: token %zu is %zu bytes long", i, len);
            goto fail;
        }
        int32_t type = d->types ? d->types[i] : TOK_TYPE_NORMAL;
        if (type < TOK_TYPE_NORMAL || type > TOK_TYPE_BYTE) {
            rc = pi_fail(err, "tokenizer: token %zu ('%.*s') has type %d, not 1..%d", i, (int)(len < 64 ? len : 64),
                         d->tokens[i], type, TOK_TYPE_BYTE);
            goto fail;
        }
        t->tok_off[i] = blob_len;
        t->tok_len[i] = (uint32_t)len;
        t->scores[i] = d->scores ? d->scores[i] : 0.0f;
        t->types[i] = type;
        blob_len += len + 1;
    }
    if (!(t->blob = malloc(blob_len))) {
        rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu bytes of token text", blob_len);
        goto fail;
    }
    if ((rc = tok_map_init(&t->vocab, n)) < 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        char *s = t->blob + t->tok_off[i];
        memcpy(s, d->tokens[i], t->tok_len[i]);
        s[t->tok_len[i]] = 0;
        if ((rc = tok_map_put(&t->vocab, s, t->tok_len[i], (int32_t)i, true)) < 0)
            goto fail;
    }
    if ((rc = tok_collect_specials(t)) < 0)
        goto fail;

    tok_add_eog(t, t->eos);
    for (size_t i = 0; i < sizeof tok_eog_names / sizeof tok_eog_names[0]; i++)
        tok_add_eog(t, tok_map_get(&t->vocab, tok_eog_names[i], strlen(tok_eog_names[i])));

    for (int b = 0; b < TOK_N_BYTES; b++)
        t->byte_tok[b] = -1;
    if (t->kind == TOK_KIND_SPM) {
        for (int b = 0; b < TOK_N_BYTES; b++) {
            char name[8];
            int len = snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_tok[b] = tok_map_get(&t->vocab, name, (size_t)len);
        }
    } else if ((rc = tok_bpe_new(t, d->pre, d->merges, d->n_merges)) < 0) {
        if (rc == -PI_E_FORMAT)
            rc = pi_err_neg(err); /* the caller's code; tok_bpe_new's message stays */
        goto fail;
    }
    *out = t;
    return 0;
fail:
    tok_free(t);
    return rc;
}

int tok_new(struct pi_tokenizer **out, const struct tok_vocab_desc *d)
{
    if (!out || !d)
        return pi_fail(PI_E_INVAL, "tok_new: NULL argument");
    return tok_build(out, d, PI_E_INVAL);
}

void tok_free(struct pi_tokenizer *t)
{
    if (!t)
        return;
    tok_bpe_free(t->bpe);
    tok_map_fini(&t->vocab);
    free(t->blob);
    free(t->tok_off);
    free(t->tok_len);
    free(t->scores);
    free(t->types);
    free(t->special);
    free(t);
}

/* ======================= from GGUF ======================= */

#define TOK_KEY_MODEL "tokenizer.ggml.model"
#define TOK_KEY_PRE "tokenizer.ggml.pre"
#define TOK_KEY_TOKENS "tokenizer.ggml.tokens"
#define TOK_KEY_SCORES "tokenizer.ggml.scores"
#define TOK_KEY_TYPES "tokenizer.ggml.token_type"
#define TOK_KEY_MERGES "tokenizer.ggml.merges"
#define TOK_NO_ID UINT32_MAX /* some writers store "none" as u32 -1 */

/* Optional token id: absent → keep *id (the default). */
static int tok_gguf_id(const struct gguf_file *f, const char *key, int32_t *id)
{
    uint32_t u;
    int32_t i;
    int rc = gguf_get_u32(f, key, &u);
    if (rc == -PI_E_NOTFOUND)
        return 0;
    if (rc == 0) {
        if (u == TOK_NO_ID)
            *id = -1;
        else if (u > INT32_MAX)
            return pi_fail(PI_E_FORMAT, "tokenizer: %s = %u out of range", key, u);
        else
            *id = (int32_t)u;
        return 0;
    }
    if (gguf_get_i32(f, key, &i) == 0 && i >= -1) { /* a signed -1 also means "none" */
        *id = i;
        return 0;
    }
    return rc;
}

static int tok_gguf_bool(const struct gguf_file *f, const char *key, bool *v)
{
    int rc = gguf_get_bool(f, key, v);
    return rc == -PI_E_NOTFOUND ? 0 : rc;
}

/* A string array of exactly n entries (n == 0: any length, returned in *n). */
static int tok_gguf_strs(const struct gguf_file *f, const char *key, size_t *n, const char ***strs, size_t **lens)
{
    enum gguf_type et;
    const void *data;
    size_t cnt;
    int rc = gguf_get_arr(f, key, &et, &cnt, &data);
    if (rc == -PI_E_NOTFOUND)
        return pi_fail(PI_E_FORMAT, "tokenizer: required array %s is missing", key);
    if (rc < 0)
        return rc;
    if (et != GGUF_TYPE_STRING)
        return pi_fail(PI_E_TYPE, "tokenizer: %s has element type %d, expected string", key, (int)et);
    if (*n && cnt != *n)
        return pi_fail(PI_E_FORMAT, "tokenizer: %s has %zu entries, expected %zu", key, cnt, *n);
    *strs = malloc((cnt ? cnt : 1) * sizeof **strs);
    *lens = malloc((cnt ? cnt : 1) * sizeof **lens);
    if (!*strs || !*lens)
        return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu strings of %s", cnt, key);
    for (size_t i = 0; i < cnt; i++)
        if ((rc = gguf_get_arr_str(f, key, i, &(*strs)[i], &(*lens)[i])) < 0)
            return rc;
    *n = cnt;
    return 0;
}

/* Optional numeric array of n 4-byte elements (f32 or i32/u32), copied to dst (may be unaligned). */
static int tok_gguf_arr4(const struct gguf_file *f, const char *key, size_t n, enum gguf_type want, void **dst)
{
    enum gguf_type et;
    const void *data;
    size_t cnt;
    int rc = gguf_get_arr(f, key, &et, &cnt, &data);
    if (rc == -PI_E_NOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    bool ok = et == want || (want == GGUF_TYPE_INT32 && et == GGUF_TYPE_UINT32);
    if (!ok)
        return pi_fail(PI_E_TYPE, "tokenizer: %s has element type %d, expected %d", key, (int)et, (int)want);
    if (cnt != n)
        return pi_fail(PI_E_FORMAT, "tokenizer: %s has %zu entries for %zu tokens", key, cnt, n);
    if (!(*dst = malloc(n * 4)))
        return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %s", key);
    memcpy(*dst, data, n * 4);
    return 0;
}

int tok_new_from_gguf(struct pi_tokenizer **out, const struct gguf_file *f)
{
    struct tok_vocab_desc d = {.bos = -1, .eos = -1, .unk = -1, .pad = -1};
    const char *model = NULL;
    const char **tokens = NULL, **merges = NULL;
    size_t *tok_lens = NULL, *merge_lens = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    int rc;

    if (!out || !f)
        return pi_fail(PI_E_INVAL, "tok_new_from_gguf: NULL argument");
    *out = NULL;
    rc = gguf_get_str(f, TOK_KEY_MODEL, &model);
    if (rc == -PI_E_NOTFOUND)
        return pi_fail(PI_E_NOTFOUND, "tokenizer: key %s is missing (no tokenizer in this GGUF)", TOK_KEY_MODEL);
    if (rc < 0)
        return rc;
    if (strcmp(model, "llama") == 0) {
        /* llama.cpp's defaults for SentencePiece vocabularies */
        d.kind = TOK_KIND_SPM;
        d.unk = 0, d.bos = 1, d.eos = 2;
        d.add_bos = true;
        d.add_space_prefix = true;
    } else if (strcmp(model, "gpt2") == 0) {
        d.kind = TOK_KIND_BPE;
        rc = gguf_get_str(f, TOK_KEY_PRE, &d.pre);
        if (rc < 0 && rc != -PI_E_NOTFOUND)
            return rc;
    } else {
        return pi_fail(PI_E_UNSUPPORTED, "tokenizer: unsupported tokenizer model '%s' (%s)", model, TOK_KEY_MODEL);
    }

    if ((rc = tok_gguf_strs(f, TOK_KEY_TOKENS, &d.n_vocab, &tokens, &tok_lens)) < 0)
        goto fail;
    if ((rc = tok_gguf_arr4(f, TOK_KEY_SCORES, d.n_vocab, GGUF_TYPE_FLOAT32, (void **)&scores)) < 0 ||
        (rc = tok_gguf_arr4(f, TOK_KEY_TYPES, d.n_vocab, GGUF_TYPE_INT32, (void **)&types)) < 0)
        goto fail;
    if (d.kind == TOK_KIND_BPE && (rc = tok_gguf_strs(f, TOK_KEY_MERGES, &d.n_merges, &merges, &merge_lens)) < 0)
        goto fail;
    if ((rc = tok_gguf_id(f, "tokenizer.ggml.bos_token_id", &d.bos)) < 0 ||
        (rc = tok_gguf_id(f, "tokenizer.ggml.eos_token_id", &d.eos)) < 0 ||
        (rc = tok_gguf_id(f, "tokenizer.ggml.unknown_token_id", &d.unk)) < 0 ||
        (rc = tok_gguf_id(f, "tokenizer.ggml.padding_token_id", &d.pad)) < 0 ||
        (rc = tok_gguf_bool(f, "tokenizer.ggml.add_bos_token", &d.add_bos)) < 0 ||
        (rc = tok_gguf_bool(f, "tokenizer.ggml.add_eos_token", &d.add_eos)) < 0 ||
        (rc = tok_gguf_bool(f, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix)) < 0)
        goto fail;
    /* llama.cpp's SPM defaults may not exist in a small vocabulary: drop them rather than fail */
    if (gguf_find_key(f, "tokenizer.ggml.unknown_token_id") < 0 && d.unk >= 0 && (size_t)d.unk >= d.n_vocab)
        d.unk = -1;
    d.tokens = tokens;
    d.token_lens = tok_lens;
    d.scores = scores;
    d.types = types;
    d.merges = merges;
    rc = tok_build(out, &d, PI_E_FORMAT);
fail:
    free(tokens);
    free(tok_lens);
    free(merges);
    free(merge_lens);
    free(scores);
    free(types);
    return rc;
}

/* ======================= accessors ======================= */

enum tok_kind tok_kind(const struct pi_tokenizer *t) { return t->kind; }
int32_t tok_n_vocab(const struct pi_tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const struct pi_tokenizer *t) { return t->bos; }
int32_t tok_eos(const struct pi_tokenizer *t) { return t->eos; }
int32_t tok_unk(const struct pi_tokenizer *t) { return t->unk; }
int32_t tok_pad(const struct pi_tokenizer *t) { return t->pad; }
bool tok_add_bos(const struct pi_tokenizer *t) { return t->add_bos; }

bool tok_is_eog(const struct pi_tokenizer *t, int32_t id)
{
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return id >= 0;
    return false;
}

const char *tok_text(const struct pi_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    if (len)
        *len = t->tok_len[id];
    return tok_str(t, id);
}

enum tok_type tok_token_type(const struct pi_tokenizer *t, int32_t id)
{
    return id < 0 || id >= t->n_vocab ? (enum tok_type)0 : (enum tok_type)t->types[id];
}

int32_t tok_lookup(const struct pi_tokenizer *t, const char *s, size_t len)
{
    return tok_map_get(&t->vocab, s, len);
}

/* ======================= encode ======================= */

/* A piece of the input: raw text [off, off + len), or one special token (id ≥ 0). */
struct tok_frag {
    size_t off, len;
    int32_t id;
};
struct tok_frags {
    struct tok_frag *v;
    size_t n, cap;
};

static int tok_frags_push(struct tok_frags *a, size_t off, size_t len, int32_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        struct tok_frag *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu fragments", cap);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (struct tok_frag){off, len, id};
    return 0;
}

/* Cut the raw fragments of *cur at every occurrence of special token id (into *next, then swapped). */
static int tok_split_one(const struct pi_tokenizer *t, const char *text, int32_t id, struct tok_frags *cur,
                         struct tok_frags *next)
{
    const char *sp = tok_str(t, id);
    size_t sl = t->tok_len[id];
    int rc;
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        struct tok_frag f = cur->v[i];
        if (f.id >= 0) {
            if ((rc = tok_frags_push(next, f.off, f.len, f.id)) < 0)
                return rc;
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        while (pos < end) {
            const char *hit = memmem(text + pos, end - pos, sp, sl);
            size_t at = hit ? (size_t)(hit - text) : end;
            if (at > pos && (rc = tok_frags_push(next, pos, at - pos, -1)) < 0)
                return rc;
            if (!hit)
                break;
            if ((rc = tok_frags_push(next, at, sl, id)) < 0)
                return rc;
            pos = at + sl;
        }
    }
    struct tok_frags tmp = *cur;
    *cur = *next;
    *next = tmp;
    return 0;
}

int tok_encode(const struct pi_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
               int32_t **out, size_t *n_out)
{
    struct tok_frags frags = {0}, spare = {0};
    struct tok_ids ids = {0};
    int rc;

    if (!t || !out || !n_out || (!text && len))
        return pi_fail(PI_E_INVAL, "tok_encode: NULL argument");
    *out = NULL;
    *n_out = 0;
    if (add_bos && t->bos >= 0 && (rc = tok_ids_push(&ids, t->bos)) < 0)
        goto fail;
    if (len && (rc = tok_frags_push(&frags, 0, len, -1)) < 0)
        goto fail;
    /* As llama.cpp: user-defined tokens always split the text; control and unknown ones only when
     * the caller lets the text contain special tokens. Longest first, so "<|im_start|>" wins over "<". */
    for (size_t i = 0; i < t->n_special && frags.n; i++) {
        int32_t id = t->special[i];
        if (!parse_special && t->types[id] != TOK_TYPE_USER_DEFINED)
            continue;
        if ((rc = tok_split_one(t, text, id, &frags, &spare)) < 0)
            goto fail;
    }
    for (size_t i = 0; i < frags.n; i++) {
        const struct tok_frag *f = &frags.v[i];
        if (f->id >= 0)
            rc = tok_ids_push(&ids, f->id);
        else if (t->kind == TOK_KIND_SPM)
            /* the dummy prefix marks the start of the text only (HF legacy=false), not each fragment */
            rc = tok_spm_encode(t, text + f->off, f->len, t->add_space_prefix && f->off == 0, &ids);
        else
            rc = tok_bpe_encode(t, text + f->off, f->len, &ids);
        if (rc < 0)
            goto fail;
    }
    if (add_bos && t->add_eos && (rc = tok_ids_push(&ids, t->eos)) < 0)
        goto fail;
    if (!ids.v && !(ids.v = malloc(sizeof *ids.v))) { /* a valid pointer even for zero tokens */
        rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    free(frags.v);
    free(spare.v);
    *out = ids.v;
    *n_out = ids.n;
    return 0;
fail:
    free(frags.v);
    free(spare.v);
    free(ids.v);
    return rc;
}

/* ======================= decode ======================= */

#define TOK_SPM_SPACE "\xe2\x96\x81"   /* U+2581 "▁", SentencePiece's visible space */
#define TOK_SPM_SPACE_LEN 3
#define TOK_UNK_GLYPH "\xe2\x96\x85"   /* U+2585 "▅", what llama.cpp prints for <unk> */
#define TOK_BYTE_PIECE_LEN 6           /* "<0xAB>" */

/* Bounded writer: counts every byte, stores those that fit. */
struct tok_out {
    char *buf;
    size_t cap, n;
};

static void tok_put(struct tok_out *o, const char *s, size_t n)
{
    if (o->n < o->cap)
        memcpy(o->buf + o->n, s, n < o->cap - o->n ? n : o->cap - o->n);
    o->n += n;
}

static int tok_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* "<0xAB>" → 0xAB, or -1 */
static int tok_byte_value(const char *s, size_t n)
{
    if (n != TOK_BYTE_PIECE_LEN || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int hi = tok_hex(s[3]), lo = tok_hex(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

int tok_piece(const struct pi_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap)
{
    if (!t || (!buf && cap))
        return pi_fail(PI_E_INVAL, "tok_piece: NULL argument");
    if (id < 0 || id >= t->n_vocab)
        return pi_fail(PI_E_RANGE, "tokenizer: token id %d out of range 0..%d", id, t->n_vocab - 1);
    struct tok_out o = {buf, cap, 0};
    const char *s = tok_str(t, id);
    size_t n = t->tok_len[id];
    switch (t->types[id]) {
    case TOK_TYPE_CONTROL:
        if (render_special)
            tok_put(&o, s, n);
        break;
    case TOK_TYPE_UNKNOWN:
        if (t->kind == TOK_KIND_SPM)
            tok_put(&o, TOK_UNK_GLYPH, strlen(TOK_UNK_GLYPH));
        else if (render_special)
            tok_put(&o, s, n);
        break;
    case TOK_TYPE_USER_DEFINED:
        tok_put(&o, s, n);
        break;
    case TOK_TYPE_BYTE: {
        int b = tok_byte_value(s, n);
        if (b >= 0) {
            char c = (char)b;
            tok_put(&o, &c, 1);
        } else {
            tok_put(&o, s, n);
        }
        break;
    }
    default: /* normal, unused */
        if (t->kind == TOK_KIND_BPE) {
            o.n = tok_bpe_unmap(t->bpe, s, n, buf, cap);
            break;
        }
        for (size_t i = 0; i < n;) {
            if (n - i >= TOK_SPM_SPACE_LEN && memcmp(s + i, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN) == 0) {
                tok_put(&o, " ", 1);
                i += TOK_SPM_SPACE_LEN;
            } else {
                tok_put(&o, s + i, 1);
                i++;
            }
        }
        break;
    }
    if (o.n > INT32_MAX)
        return pi_fail(PI_E_RANGE, "tokenizer: piece of token %d too long", id);
    return (int)o.n;
}

int tok_decode(const struct pi_tokenizer *t, const int32_t *ids, size_t n, bool strip_leading_space, char **out,
               size_t *len)
{
    char *buf = NULL;
    size_t used = 0, cap = 0;
    int rc;

    if (!t || !out || !len || (!ids && n))
        return pi_fail(PI_E_INVAL, "tok_decode: NULL argument");
    *out = NULL;
    *len = 0;
    for (size_t i = 0; i <= n; i++) {
        int need = i < n ? tok_piece(t, ids[i], false, NULL, 0) : 0;
        if (need < 0) {
            rc = need;
            goto fail;
        }
        if (used + (size_t)need + 1 > cap) { /* +1 for the final NUL */
            size_t ncap = cap ? cap : 64;
            while (ncap < used + (size_t)need + 1)
                ncap *= 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory decoding %zu tokens", n);
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        if (i < n)
            used += (size_t)tok_piece(t, ids[i], false, buf + used, cap - used);
    }
    buf[used] = 0;
    /* only SPM's dummy prefix put a space there; a gpt2 space is part of the text */
    if (strip_leading_space && t->kind == TOK_KIND_SPM && t->add_space_prefix && used && buf[0] == ' ') {
        memmove(buf, buf + 1, used);
        used--;
    }
    *out = buf;
    *len = used;
    return 0;
fail:
    free(buf);
    return rc;
}
