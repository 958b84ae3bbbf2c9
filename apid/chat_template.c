/* chat_template.c — recognise and render the chat prompt formats (see chat_template.h). */
#include "chat_template.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pi_err.h"

struct family {
    const char *name;
    const char *eot;
};

static const struct family families[CHAT_FAMILY_COUNT] = {
    [CHAT_CHATML] = { "chatml", "<|im_end|>" },   [CHAT_LLAMA2] = { "llama2", "</s>" },
    [CHAT_LLAMA3] = { "llama3", "<|eot_id|>" },   [CHAT_MISTRAL] = { "mistral", "</s>" },
    [CHAT_ZEPHYR] = { "zephyr", "</s>" },         [CHAT_GEMMA] = { "gemma", "<end_of_turn>" },
    [CHAT_PHI3] = { "phi3", "<|end|>" },
};

const char *chat_family_name(enum chat_family f) { return (unsigned)f < CHAT_FAMILY_COUNT ? families[f].name : NULL; }
const char *chat_family_eot(enum chat_family f) { return (unsigned)f < CHAT_FAMILY_COUNT ? families[f].eot : NULL; }
const char *chat_family_list(void) { return "chatml, llama2, llama3, mistral, zephyr, gemma, phi3"; }

int chat_family_from_name(const char *name)
{
    if (!strcasecmp(name, "qwen") || !strcasecmp(name, "qwen2"))
        return CHAT_CHATML;
    for (int i = 0; i < CHAT_FAMILY_COUNT; i++)
        if (!strcasecmp(name, families[i].name))
            return i;
    return -1;
}

int chat_family_detect(const char *j)
{
    if (!j || !*j)
        return -1;
    /* most specific markers first: phi3 and zephyr share <|assistant|>, llama2 and mistral [INST] */
    if (strstr(j, "<|im_start|>"))
        return CHAT_CHATML;
    if (strstr(j, "<|start_header_id|>"))
        return CHAT_LLAMA3;
    if (strstr(j, "<start_of_turn>"))
        return CHAT_GEMMA;
    if (strstr(j, "<|assistant|>") && strstr(j, "<|end|>"))
        return CHAT_PHI3;
    if (strstr(j, "<|assistant|>") && strstr(j, "<|user|>"))
        return CHAT_ZEPHYR;
    if (strstr(j, "[INST]") && strstr(j, "<<SYS>>"))
        return CHAT_LLAMA2;
    if (strstr(j, "[INST]"))
        return CHAT_MISTRAL;
    return -1;
}

struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void sb_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 256;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

enum role { R_SYSTEM, R_USER, R_ASSISTANT };

static int role_of(const char *r)
{
    if (!strcmp(r, "system") || !strcmp(r, "developer"))
        return R_SYSTEM;
    if (!strcmp(r, "user"))
        return R_USER;
    if (!strcmp(r, "assistant"))
        return R_ASSISTANT;
    return -1;
}

/* Families without a system turn (llama2's <<SYS>> block, mistral, gemma) put the system text into
 * the first user message. */
static void render_inst(enum chat_family f, const struct chat_msg *m, size_t n, struct sbuf *b)
{
    const char *sys = NULL;
    bool first_user = true;
    for (size_t i = 0; i < n; i++) {
        const int r = role_of(m[i].role);
        if (r == R_SYSTEM) {
            sys = m[i].content;
            continue;
        }
        if (r == R_USER) {
            const char *bos = first_user ? "" : "<s>"; /* the first BOS is the supervisor's */
            if (f == CHAT_LLAMA2) {
                if (sys && first_user)
                    sb_add(b, "%s[INST] <<SYS>>\n%s\n<</SYS>>\n\n%s [/INST]", bos, sys, m[i].content);
                else
                    sb_add(b, "%s[INST] %s [/INST]", bos, m[i].content);
            } else if (f == CHAT_MISTRAL) {
                if (sys && first_user)
                    sb_add(b, "[INST] %s\n\n%s [/INST]", sys, m[i].content);
                else
                    sb_add(b, "[INST] %s [/INST]", m[i].content);
            } else { /* gemma */
                if (sys && first_user)
                    sb_add(b, "<start_of_turn>user\n%s\n\n%s<end_of_turn>\n", sys, m[i].content);
                else
                    sb_add(b, "<start_of_turn>user\n%s<end_of_turn>\n", m[i].content);
            }
            first_user = false;
        } else if (f == CHAT_LLAMA2) {
            sb_add(b, " %s </s>", m[i].content);
        } else if (f == CHAT_MISTRAL) {
            sb_add(b, "%s</s>", m[i].content);
        } else {
            sb_add(b, "<start_of_turn>model\n%s<end_of_turn>\n", m[i].content);
        }
    }
    if (f == CHAT_GEMMA)
        sb_add(b, "<start_of_turn>model\n");
}

int chat_render(enum chat_family f, const struct chat_msg *m, size_t n, char **out)
{
    *out = NULL;
    if ((unsigned)f >= CHAT_FAMILY_COUNT)
        return pi_fail(PI_E_INVAL, "unknown chat template family %d", (int)f);
    for (size_t i = 0; i < n; i++)
        if (!m[i].role || role_of(m[i].role) < 0)
            return pi_fail(PI_E_INVAL, "messages[%zu].role: '%.32s' is not system, developer, user or assistant", i,
                           m[i].role ? m[i].role : "(none)");
    struct sbuf b = { 0 };
    switch (f) {
    case CHAT_CHATML:
        for (size_t i = 0; i < n; i++)
            sb_add(&b, "<|im_start|>%s\n%s<|im_end|>\n", role_of(m[i].role) == R_SYSTEM ? "system" : m[i].role,
                   m[i].content);
        sb_add(&b, "<|im_start|>assistant\n");
        break;
    case CHAT_LLAMA3:
        for (size_t i = 0; i < n; i++)
            sb_add(&b, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>",
                   role_of(m[i].role) == R_SYSTEM ? "system" : m[i].role, m[i].content);
        sb_add(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CHAT_ZEPHYR:
    case CHAT_PHI3: {
        const char *end = f == CHAT_ZEPHYR ? "</s>" : "<|end|>";
        for (size_t i = 0; i < n; i++)
            sb_add(&b, "<|%s|>\n%s%s\n", role_of(m[i].role) == R_SYSTEM ? "system" : m[i].role, m[i].content, end);
        sb_add(&b, "<|assistant|>\n");
        break;
    }
    case CHAT_LLAMA2:
    case CHAT_MISTRAL:
    case CHAT_GEMMA:
        render_inst(f, m, n, &b);
        break;
    default:
        break;
    }
    if (b.oom || !b.p) {
        free(b.p);
        return pi_fail(PI_E_NOMEM, "rendering the chat prompt");
    }
    *out = b.p;
    return 0;
}
