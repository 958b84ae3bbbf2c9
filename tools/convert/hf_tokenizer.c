/* hf_tokenizer.c — Hugging Face tokenizer files → struct hf_vocab → GGUF tokenizer.* keys. */
#include "hf_tokenizer.h"

#include "gguf.h"
#include "hf_config.h"
#include "pi_err.h"
#include "spm_model.h"
#include "tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Score of padding and added tokens, as llama.cpp's converter writes it: never chosen by merges. */
#define HF_UNUSED_SCORE (-1000.0f)

/* The split regexes of the pre-tokenizers we implement, exactly as tokenizer.json spells them.
 * Llama 3 groups digits by three; Qwen2 splits every digit. */
#define HF_REGEX_LLAMA3                                                                            \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define HF_REGEX_QWEN2                                                                             \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const struct {
    const char *regex;
    const char *pre;
} hf_pre_regexes[] = {
    { HF_REGEX_LLAMA3, HF_PRE_LLAMA3 },
    { HF_REGEX_QWEN2, HF_PRE_QWEN2 },
};

/* Load DIR/NAME as JSON; *out = NULL when the file does not exist. */
static int hf_json_opt(const char *dir, const char *name, json_t **out)
{
    int rc = 0;
    char *path = NULL;
    *out = NULL;
    if (asprintf(&path, "%s/%s", dir, name) < 0) return pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
    if (access(path, F_OK) == 0) {
        json_error_t jerr;
        *out = json_load_file(path, 0, &jerr);
        if (!*out) rc = pi_fail(PI_E_FORMAT, "%s: %s (line %d)", path, jerr.text, jerr.line);
        else if (!json_is_object(*out)) {
            rc = pi_fail(PI_E_FORMAT, "%s: not a JSON object", path);
            json_decref(*out);
            *out = NULL;
        }
    }
    free(path);
    return rc;
}

static int hf_vocab_alloc(struct hf_vocab *v, size_t n, bool with_scores)
{
    v->n = n;
    v->tokens = calloc(n, sizeof *v->tokens);
    v->types = calloc(n, sizeof *v->types);
    v->scores = with_scores ? calloc(n, sizeof *v->scores) : NULL;
    if (!v->tokens || !v->types || (with_scores && !v->scores))
        return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu tokens", n);
    return 0;
}

/* Set slot id to a copy of text. */
static int hf_set_token(struct hf_vocab *v, size_t id, const char *text, int32_t type)
{
    char *s = strdup(text);
    if (!s) return pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
    free(v->tokens[id]);
    v->tokens[id] = s;
    v->types[id] = type;
    return 0;
}

/* The model's embedding has vocab_size rows; ids the tokenizer leaves unnamed get placeholder
 * pieces (llama.cpp's "[PADi]") that nothing can produce. */
static int hf_fill_padding(struct hf_vocab *v)
{
    char buf[32];
    for (size_t i = 0; i < v->n; i++) {
        if (v->tokens[i]) continue;
        snprintf(buf, sizeof buf, "[PAD%zu]", i);
        int rc = hf_set_token(v, i, buf, TOK_TYPE_UNUSED);
        if (rc) return rc;
        if (v->scores) v->scores[i] = HF_UNUSED_SCORE;
    }
    return 0;
}

static int hf_vocab_from_spm(struct hf_vocab *v, const char *path, const struct hf_config *cfg)
{
    struct spm_model m = { 0 };
    int rc = spm_model_load(&m, path);
    if (rc) return rc;
    if (m.n > (size_t)cfg->n_vocab) {
        rc = pi_fail(PI_E_RANGE, "%s: %zu pieces but config.json vocab_size is %lld", path, m.n, (long long)cfg->n_vocab);
        goto fail;
    }
    if ((rc = hf_vocab_alloc(v, (size_t)cfg->n_vocab, true))) goto fail;
    v->model = "llama";
    for (size_t i = 0; i < m.n; i++) {
        if ((rc = hf_set_token(v, i, m.pieces[i], m.types[i]))) goto fail;
        v->scores[i] = m.scores[i];
    }
    v->bos = m.bos_id;
    v->eos = m.eos_id;
    v->unk = m.unk_id;
    v->pad = m.pad_id;
    v->add_bos = true; /* SentencePiece llama models start every text with BOS */
    v->has_space_prefix = true;
    v->add_space_prefix = m.add_dummy_prefix;
    spm_model_fini(&m);
    return 0;
fail:
    spm_model_fini(&m);
    return rc;
}

/* Is node of this type, or a Sequence (pretokenizers / decoders) holding one of this type? */
static bool hf_json_has_type(const json_t *node, const char *type)
{
    const char *t = json_string_value(json_object_get(node, "type"));
    if (!t) return false;
    if (!strcmp(t, type)) return true;
    if (strcmp(t, "Sequence")) return false;
    const json_t *items = json_object_get(node, "pretokenizers");
    if (!items) items = json_object_get(node, "decoders");
    size_t i;
    const json_t *it;
    json_array_foreach((json_t *)items, i, it) if (hf_json_has_type(it, type)) return true;
    return false;
}

static bool hf_is_bytelevel_bpe(const json_t *tj)
{
    const char *mt = json_string_value(json_object_get(json_object_get(tj, "model"), "type"));
    return mt && !strcmp(mt, "BPE") &&
           (hf_json_has_type(json_object_get(tj, "pre_tokenizer"), "ByteLevel") ||
            hf_json_has_type(json_object_get(tj, "decoder"), "ByteLevel"));
}

/* What a pre-tokenizer does, gathered from one node or a Sequence of them. */
struct hf_pre_info {
    int n_split;
    const char *regex;        /* of the (single) Split */
    bool split_plain;         /* behavior Isolated, not inverted */
    bool byte_level;
    bool byte_level_regex;    /* ByteLevel use_regex (default true): applies the GPT-2 regex */
    const char *other;        /* a pre-tokenizer type we do not model */
};

static void hf_pre_scan(const json_t *node, struct hf_pre_info *pi)
{
    const char *t = json_string_value(json_object_get(node, "type"));
    if (!t) {
        pi->other = "(untyped)";
    } else if (!strcmp(t, "Sequence")) {
        size_t i;
        const json_t *it;
        json_array_foreach(json_object_get(node, "pretokenizers"), i, it) hf_pre_scan(it, pi);
    } else if (!strcmp(t, "Split")) {
        const char *behavior = json_string_value(json_object_get(node, "behavior"));
        pi->n_split++;
        pi->regex = json_string_value(json_object_get(json_object_get(node, "pattern"), "Regex"));
        pi->split_plain = (!behavior || !strcmp(behavior, "Isolated")) && !json_is_true(json_object_get(node, "invert"));
    } else if (!strcmp(t, "ByteLevel")) {
        const json_t *ur = json_object_get(node, "use_regex");
        pi->byte_level = true;
        pi->byte_level_regex = !ur || json_is_true(ur);
    } else {
        pi->other = t;
    }
}

/* Name the pre-tokenizer, or fail: an approximate one would silently tokenize differently. */
static int hf_map_pre(const json_t *pretok, const char **out)
{
    struct hf_pre_info pi = { 0 };
    if (!pretok || json_is_null(pretok))
        return pi_fail(PI_E_UNSUPPORTED, "tokenizer.json: cannot map pre-tokenizer: byte-level BPE without one");
    hf_pre_scan(pretok, &pi);
    if (pi.other)
        return pi_fail(PI_E_UNSUPPORTED, "tokenizer.json: cannot map pre-tokenizer: it contains a %s step", pi.other);
    if (!pi.byte_level)
        return pi_fail(PI_E_UNSUPPORTED, "tokenizer.json: cannot map pre-tokenizer: no ByteLevel step");
    if (pi.n_split == 0 && pi.byte_level_regex) {
        *out = HF_PRE_GPT2;
        return 0;
    }
    if (pi.n_split != 1 || !pi.regex || !pi.split_plain || pi.byte_level_regex)
        return pi_fail(PI_E_UNSUPPORTED,
                       "tokenizer.json: cannot map pre-tokenizer: %d Split steps%s, ByteLevel use_regex %s",
                       pi.n_split, pi.n_split == 1 && !pi.split_plain ? " (not Isolated)" : "",
                       pi.byte_level_regex ? "true" : "false");
    for (size_t i = 0; i < sizeof hf_pre_regexes / sizeof hf_pre_regexes[0]; i++) {
        if (!strcmp(pi.regex, hf_pre_regexes[i].regex)) {
            *out = hf_pre_regexes[i].pre;
            return 0;
        }
    }
    return pi_fail(PI_E_UNSUPPORTED, "tokenizer.json: cannot map pre-tokenizer regex %.300s", pi.regex);
}

/* merges: ["a b", ...] or [["a", "b"], ...] → "a b". */
static int hf_read_merges(struct hf_vocab *v, const json_t *merges)
{
    size_t n = json_array_size(merges), i;
    const json_t *m;
    v->merges = calloc(n ? n : 1, sizeof *v->merges);
    if (!v->merges) return pi_fail(PI_E_NOMEM, "tokenizer: out of memory for %zu merges", n);
    json_array_foreach((json_t *)merges, i, m) {
        const char *a = json_string_value(json_array_get(m, 0)), *b = json_string_value(json_array_get(m, 1));
        char *s = NULL;
        if (json_is_string(m)) {
            if (!strchr(json_string_value(m), ' '))
                return pi_fail(PI_E_FORMAT, "tokenizer.json: merge %zu '%.100s' is not 'a b'", i, json_string_value(m));
            s = strdup(json_string_value(m));
        } else if (json_array_size(m) == 2 && a && b) {
            if (asprintf(&s, "%s %s", a, b) < 0) s = NULL;
        } else {
            return pi_fail(PI_E_FORMAT, "tokenizer.json: merge %zu is neither a string nor a pair of strings", i);
        }
        if (!s) return pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
        v->merges[v->n_merges++] = s;
    }
    return 0;
}

static int hf_vocab_from_bpe(struct hf_vocab *v, const json_t *tj, const struct hf_config *cfg)
{
    int rc;
    const json_t *model = json_object_get(tj, "model");
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return pi_fail(PI_E_FORMAT, "tokenizer.json: model.vocab is not an object");
    if (!json_is_array(json_object_get(model, "merges")))
        return pi_fail(PI_E_FORMAT, "tokenizer.json: model.merges is not an array");
    if ((rc = hf_map_pre(json_object_get(tj, "pre_tokenizer"), &v->pre))) return rc;
    if ((rc = hf_vocab_alloc(v, (size_t)cfg->n_vocab, false))) return rc;
    v->model = "gpt2";
    v->bos = v->eos = v->unk = v->pad = -1;
    const char *tok;
    json_t *idv;
    json_object_foreach((json_t *)vocab, tok, idv) {
        json_int_t id = json_is_integer(idv) ? json_integer_value(idv) : -1;
        if (id < 0 || id >= cfg->n_vocab)
            return pi_fail(PI_E_RANGE, "tokenizer.json: token '%.100s' has id %lld outside vocab_size %lld", tok,
                           (long long)id, (long long)cfg->n_vocab);
        if (v->tokens[id])
            return pi_fail(PI_E_FORMAT, "tokenizer.json: id %lld is used by '%.100s' and '%.100s'", (long long)id,
                           v->tokens[id], tok);
        if ((rc = hf_set_token(v, (size_t)id, tok, TOK_TYPE_NORMAL))) return rc;
    }
    return hf_read_merges(v, json_object_get(model, "merges"));
}

/* One added token {id, content, special}. SentencePiece pieces are authoritative, so there only
 * slots the model leaves unused are named; in a BPE vocab added tokens are typed by specialness. */
static int hf_add_token(struct hf_vocab *v, json_int_t id, const json_t *t, const char *src)
{
    const char *content = json_string_value(json_object_get(t, "content"));
    if (!content) return pi_fail(PI_E_FORMAT, "%s: added token %lld has no content", src, (long long)id);
    if (id < 0 || (size_t)id >= v->n)
        return pi_fail(PI_E_RANGE, "%s: added token '%.100s' has id %lld outside vocab_size %zu", src, content,
                       (long long)id, v->n);
    bool is_spm = v->scores != NULL;
    if (is_spm && v->tokens[id] && v->types[id] != TOK_TYPE_UNUSED) return 0;
    int32_t type = json_is_true(json_object_get(t, "special")) ? TOK_TYPE_CONTROL : TOK_TYPE_USER_DEFINED;
    if (is_spm) v->scores[id] = HF_UNUSED_SCORE;
    return hf_set_token(v, (size_t)id, content, type);
}

static int hf_apply_added(struct hf_vocab *v, const json_t *tj, const json_t *tc)
{
    int rc;
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(tj, "added_tokens"), i, t) {
        json_int_t id = json_is_integer(json_object_get(t, "id")) ? json_integer_value(json_object_get(t, "id")) : -1;
        if ((rc = hf_add_token(v, id, t, "tokenizer.json"))) return rc;
    }
    const char *key;
    json_t *tv;
    json_object_foreach(json_object_get(tc, "added_tokens_decoder"), key, tv) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (*end || end == key) return pi_fail(PI_E_FORMAT, "tokenizer_config.json: added token id '%s'", key);
        if ((rc = hf_add_token(v, id, tv, "tokenizer_config.json"))) return rc;
    }
    return 0;
}

static int32_t hf_find_token(const struct hf_vocab *v, const char *s)
{
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->tokens[i], s)) return (int32_t)i;
    return -1;
}

/* tokenizer_config.json names special tokens by text ("<s>" or {"content": "<s>", ...}). */
static int hf_special_from_config(const struct hf_vocab *v, const json_t *tc, const char *key, int32_t *id)
{
    const json_t *t = json_object_get(tc, key);
    if (json_is_object(t)) t = json_object_get(t, "content");
    const char *s = json_string_value(t);
    if (!s) return 0;
    int32_t found = hf_find_token(v, s);
    if (found < 0)
        return pi_fail(PI_E_NOTFOUND, "tokenizer_config.json: %s '%.100s' is not in the vocabulary", key, s);
    *id = found;
    return 0;
}

static int hf_bool_opt(const json_t *tc, const char *key, bool *out)
{
    const json_t *b = json_object_get(tc, key);
    if (!b || json_is_null(b)) return 0;
    if (!json_is_boolean(b)) return pi_fail(PI_E_TYPE, "tokenizer_config.json: %s must be true or false", key);
    *out = json_is_true(b);
    return 0;
}

/* Special ids by precedence: tokenizer_config strings > config.json ids > what the model had. */
static int hf_apply_special(struct hf_vocab *v, const json_t *tc, const struct hf_config *cfg)
{
    int rc;
    if (cfg->bos_id >= 0) v->bos = cfg->bos_id;
    if (cfg->eos_id >= 0) v->eos = cfg->eos_id;
    if (cfg->pad_id >= 0) v->pad = cfg->pad_id;
    if ((rc = hf_special_from_config(v, tc, "bos_token", &v->bos)) ||
        (rc = hf_special_from_config(v, tc, "eos_token", &v->eos)) ||
        (rc = hf_special_from_config(v, tc, "unk_token", &v->unk)) ||
        (rc = hf_special_from_config(v, tc, "pad_token", &v->pad)) || (rc = hf_bool_opt(tc, "add_bos_token", &v->add_bos)) ||
        (rc = hf_bool_opt(tc, "add_eos_token", &v->add_eos)))
        return rc;
    const int32_t ids[] = { v->bos, v->eos, v->unk, v->pad };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i] >= 0 && (size_t)ids[i] >= v->n)
            return pi_fail(PI_E_RANGE, "tokenizer: special token id %d outside vocab_size %zu", ids[i], v->n);
    return 0;
}

/* chat_template: a string, or a list of {name, template} (the "default" one), or chat_template.jinja. */
static int hf_read_chat_template(struct hf_vocab *v, const char *dir, const json_t *tc)
{
    const json_t *ct = json_object_get(tc, "chat_template");
    const char *s = json_string_value(ct);
    size_t i;
    const json_t *it;
    json_array_foreach((json_t *)ct, i, it) {
        const char *name = json_string_value(json_object_get(it, "name"));
        if (name && !strcmp(name, "default")) s = json_string_value(json_object_get(it, "template"));
    }
    if (s) {
        v->chat_template = strdup(s);
        return v->chat_template ? 0 : pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
    }
    char *path = NULL;
    if (asprintf(&path, "%s/chat_template.jinja", dir) < 0) return pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
    int rc = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        size_t cap = 0, len = 0;
        char buf[4096];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
            if (len + got + 1 > cap) {
                cap = 2 * (len + got + 1);
                char *p = realloc(v->chat_template, cap);
                if (!p) {
                    rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
                    break;
                }
                v->chat_template = p;
            }
            memcpy(v->chat_template + len, buf, got);
            len += got;
            v->chat_template[len] = '\0';
        }
        if (!rc && ferror(f)) rc = pi_fail(PI_E_IO, "%s: read error", path);
        fclose(f);
    }
    free(path);
    return rc;
}

int hf_vocab_load(struct hf_vocab *v, const char *dir, const struct hf_config *cfg)
{
    int rc;
    char *spm_path = NULL;
    json_t *tj = NULL, *tc = NULL;
    memset(v, 0, sizeof *v);
    if ((rc = hf_json_opt(dir, "tokenizer.json", &tj)) || (rc = hf_json_opt(dir, "tokenizer_config.json", &tc))) goto fail;
    if (asprintf(&spm_path, "%s/tokenizer.model", dir) < 0) {
        spm_path = NULL;
        rc = pi_fail(PI_E_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    bool have_spm = access(spm_path, F_OK) == 0;
    if (tj && hf_is_bytelevel_bpe(tj)) {
        rc = hf_vocab_from_bpe(v, tj, cfg);
    } else if (have_spm) {
        rc = hf_vocab_from_spm(v, spm_path, cfg);
    } else {
        const char *mt = json_string_value(json_object_get(json_object_get(tj, "model"), "type"));
        rc = pi_fail(PI_E_UNSUPPORTED, "tokenizer: %s has no tokenizer.model and its tokenizer.json %s%s%s", dir,
                     tj ? "model type " : "is missing", tj ? (mt ? mt : "(none)") : "",
                     tj ? " is not byte-level BPE" : "");
    }
    if (rc || (rc = hf_apply_added(v, tj, tc)) || (rc = hf_fill_padding(v)) || (rc = hf_apply_special(v, tc, cfg)) ||
        (rc = hf_read_chat_template(v, dir, tc)))
        goto fail;
    free(spm_path);
    json_decref(tj);
    json_decref(tc);
    return 0;
fail:
    free(spm_path);
    json_decref(tj);
    json_decref(tc);
    hf_vocab_fini(v);
    return rc;
}

void hf_vocab_fini(struct hf_vocab *v)
{
    if (v->tokens)
        for (size_t i = 0; i < v->n; i++) free(v->tokens[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    free(v->merges);
    free(v->chat_template);
    memset(v, 0, sizeof *v);
}

static int hf_set_id(struct gguf_writer *w, const char *key, int32_t id)
{
    return id >= 0 ? gguf_writer_set_u32(w, key, (uint32_t)id) : 0;
}

int hf_vocab_write(const struct hf_vocab *v, struct gguf_writer *w)
{
    int rc;
    if ((rc = gguf_writer_set_str(w, "tokenizer.ggml.model", v->model)) ||
        (v->pre && (rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre))) ||
        (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, NULL, v->n)) ||
        (v->scores && (rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, v->n))) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, v->n)) ||
        (v->merges && (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL,
                                                    v->n_merges))) ||
        (rc = hf_set_id(w, "tokenizer.ggml.bos_token_id", v->bos)) ||
        (rc = hf_set_id(w, "tokenizer.ggml.eos_token_id", v->eos)) ||
        (rc = hf_set_id(w, "tokenizer.ggml.unknown_token_id", v->unk)) ||
        (rc = hf_set_id(w, "tokenizer.ggml.padding_token_id", v->pad)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos)) ||
        (v->has_space_prefix && (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix))) ||
        (v->chat_template && (rc = gguf_writer_set_str(w, "tokenizer.chat_template", v->chat_template))))
        return rc;
    return 0;
}
