/* test_apid_templates — apid's chat templates (recognition from template texts, rendering of every
 * family, names) and its text output (stop strings split across pieces, held-back prefixes, UTF-8
 * split across tokens, invalid bytes).
 *
 * With `--make IN.gguf OUT.gguf TOKEN_ID TEXT TEMPLATE` it instead writes a copy of a model whose
 * token TOKEN_ID becomes the control token TEXT and whose tokenizer.chat_template is TEMPLATE:
 * test_apid.py makes the models with chat templates and end-of-turn tokens that the tiny model
 * lacks. */
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "gguf.h"
#include "pi_err.h"
#include "testutil.h"
#include "textout.h"

static const struct chat_msg conv[] = {
    { "system", "Be brief." },
    { "user", "Hi" },
    { "assistant", "Hello." },
    { "user", "Why?" },
};

static void render_families(void)
{
    static const struct { enum chat_family f; const char *want; } cases[] = {
        { CHAT_CHATML, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
                       "<|im_start|>assistant\n" },
        { CHAT_LLAMA2, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Why? [/INST]" },
        { CHAT_LLAMA3, "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                       "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                       "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n" },
        { CHAT_MISTRAL, "[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Why? [/INST]" },
        { CHAT_ZEPHYR, "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nWhy?</s>\n"
                       "<|assistant|>\n" },
        { CHAT_GEMMA, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                      "<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n" },
        { CHAT_PHI3, "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\n"
                     "Why?<|end|>\n<|assistant|>\n" },
    };
    CHECK(sizeof cases / sizeof cases[0] == CHAT_FAMILY_COUNT, "every family has a case");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        CHECK_OK(chat_render(cases[i].f, conv, 4, &out));
        CHECK(out && !strcmp(out, cases[i].want), "%s:\n got  %s\n want %s", chat_family_name(cases[i].f),
              out ? out : "(null)", cases[i].want);
        free(out);
        /* the end-of-turn text closes each turn of the rendered prompt (except llama2's spaced form) */
        CHECK(strstr(cases[i].want, chat_family_eot(cases[i].f)) != NULL, "%s: eot in the prompt",
              chat_family_name(cases[i].f));
    }
    /* a lone user message, developer as system, and a bad role */
    const struct chat_msg one[] = { { "developer", "S" }, { "user", "U" } };
    char *out = NULL;
    CHECK_OK(chat_render(CHAT_CHATML, one, 2, &out));
    CHECK(out && !strcmp(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"),
          "developer renders as system: %s", out);
    free(out);
    const struct chat_msg bad[] = { { "user", "U" }, { "wizard", "W" } };
    out = NULL;
    CHECK(chat_render(CHAT_LLAMA3, bad, 2, &out) == -PI_E_INVAL && !out, "bad role refused");
    CHECK(strstr(pi_errmsg(), "messages[1].role") != NULL, "the bad role is named: %s", pi_errmsg());
}

static void recognise(void)
{
    /* the markers of the families' published templates (abridged) */
    static const struct { const char *jinja; int want; } cases[] = {
        { "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}", CHAT_CHATML },
        { "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}", CHAT_LLAMA3 },
        { "{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + messages[0]['content'] + "
          "'\\n<</SYS>>\\n\\n' %}{% endif %}{{ bos_token + '[INST] ' + content + ' [/INST]' }}", CHAT_LLAMA2 },
        { "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
          "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
          CHAT_MISTRAL },
        { "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + "
          "eos_token }}{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}",
          CHAT_ZEPHYR },
        { "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim "
          "+ '<end_of_turn>\\n' }}{% endfor %}", CHAT_GEMMA },
        { "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + '<|end|>\\n'}}"
          "{% endfor %}{{ '<|assistant|>\\n' }}", CHAT_PHI3 },
        { "{{ messages | tojson }}", -1 },
        { "", -1 },
        { NULL, -1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(chat_family_detect(cases[i].jinja) == cases[i].want, "case %zu: detected %d, want %d", i,
              chat_family_detect(cases[i].jinja), cases[i].want);
    CHECK(chat_family_from_name("qwen") == CHAT_CHATML && chat_family_from_name("Llama3") == CHAT_LLAMA3 &&
              chat_family_from_name("nope") == -1,
          "names");
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++)
        CHECK(chat_family_from_name(chat_family_name((enum chat_family)f)) == f, "name round trip %d", f);
}

/* Push pieces, collect what textout releases as it goes, return the concatenation. */
static char *feed(const char *const *stops, const char *const *pieces, bool *stopped)
{
    struct textout t;
    textout_init(&t);
    for (const char *const *s = stops; s && *s; s++)
        CHECK_OK(textout_add_stop(&t, *s, strlen(*s)));
    static char got[1024];
    size_t n = 0;
    const char *chunk;
    *stopped = false;
    for (const char *const *p = pieces; *p; p++) {
        int r = textout_push(&t, *p, strlen(*p));
        size_t k = textout_take(&t, false, &chunk);
        /* whatever is released never changes later: it is a prefix of the final text */
        memcpy(got + n, chunk, k);
        n += k;
        if (r == 1) {
            *stopped = true;
            break;
        }
    }
    size_t k = textout_take(&t, true, &chunk);
    memcpy(got + n, chunk, k);
    n += k;
    got[n] = '\0';
    CHECK(!strcmp(got, textout_text(&t)), "released chunks %s == final text %s", got, textout_text(&t));
    textout_fini(&t);
    return got;
}

static void text_output(void)
{
    bool st;
    const char *none[] = { NULL };
    CHECK(!strcmp(feed(none, (const char *[]){ "Hel", "lo", NULL }, &st), "Hello") && !st, "no stops");
    const char *nn[] = { "\n\n", NULL };
    CHECK(!strcmp(feed(nn, (const char *[]){ "a", "\n", "\n", "b", NULL }, &st), "a") && st, "stop split over pieces");
    CHECK(!strcmp(feed(nn, (const char *[]){ "a\n", "b\n", NULL }, &st), "a\nb\n") && !st, "a held \\n released at end");
    const char *two[] = { "END", "ND", NULL };
    CHECK(!strcmp(feed(two, (const char *[]){ "xxE", "ND", NULL }, &st), "xx") && st, "earliest match wins");
    const char *w[] = { "world", NULL };
    CHECK(!strcmp(feed(w, (const char *[]){ "hello wor", "ld!", NULL }, &st), "hello ") && st, "held prefix matched");
    CHECK(!strcmp(feed(w, (const char *[]){ "hello wor", "m", NULL }, &st), "hello worm") && !st, "held prefix freed");
    /* "é" = C3 A9 split over two byte tokens, and an emoji over four */
    CHECK(!strcmp(feed(none, (const char *[]){ "caf", "\xC3", "\xA9", NULL }, &st), "caf\xC3\xA9"), "utf-8 split");
    CHECK(!strcmp(feed(none, (const char *[]){ "\xF0\x9F", "\x98", "\x80!", NULL }, &st), "\xF0\x9F\x98\x80!"),
          "4-byte split");
    /* a byte that starts nothing, and an unfinished sequence at the very end, become U+FFFD */
    CHECK(!strcmp(feed(none, (const char *[]){ "a\xFF", "b", "\xE2\x82", NULL }, &st), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD"),
          "invalid bytes replaced");
    /* a stop string right after a multibyte character */
    const char *x[] = { "X", NULL };
    CHECK(!strcmp(feed(x, (const char *[]){ "\xC3", "\xA9X", NULL }, &st), "\xC3\xA9") && st, "stop after utf-8");
    struct textout t;
    textout_init(&t);
    CHECK(textout_add_stop(&t, "", 0) == -PI_E_RANGE, "empty stop refused");
    textout_fini(&t);
}

/* --make IN OUT TOKEN_ID TEXT TEMPLATE */
static int make_model(char **argv)
{
    struct gguf_file *f = NULL;
    struct gguf_writer *w = NULL;
    int rc = gguf_open(&f, argv[0]);
    if (rc)
        goto out;
    const long id = strtol(argv[2], NULL, 10);
    size_t n = 0;
    enum gguf_type et;
    const void *data;
    if ((rc = gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, &data)))
        goto out;
    if (id < 0 || (size_t)id >= n) {
        rc = pi_fail(PI_E_RANGE, "token %ld out of range", id);
        goto out;
    }
    const char **toks = calloc(n, sizeof *toks);
    size_t *lens = calloc(n, sizeof *lens);
    int32_t *types = calloc(n, sizeof *types);
    for (size_t i = 0; i < n; i++) {
        gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &toks[i], &lens[i]);
        types[i] = 1;
    }
    const void *tdata;
    size_t tn;
    if (gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &tn, &tdata) == 0 && tn == n && et == GGUF_TYPE_INT32)
        memcpy(types, tdata, n * sizeof *types);
    toks[id] = argv[3];
    lens[id] = strlen(argv[3]);
    types[id] = 3; /* control */
    if ((rc = gguf_writer_new(&w, GGUF_MAGIC_GGUF)) || (rc = gguf_writer_copy_kv(w, f)) ||
        (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, lens, n)) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n)) ||
        (rc = gguf_writer_set_str(w, "tokenizer.chat_template", argv[4])))
        goto out2;
    for (size_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        if ((rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data)))
            goto out2;
    }
    rc = gguf_writer_write_file(w, argv[1]);
out2:
    free(toks);
    free(lens);
    free(types);
out:
    if (rc)
        fprintf(stderr, "--make: %s: %s\n", pi_strerror(rc), pi_errmsg());
    gguf_writer_free(w);
    gguf_close(f);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "--make"))
        return make_model(argv + 2);
    render_families();
    recognise();
    text_output();
    return tu_finish("apid_templates");
}
