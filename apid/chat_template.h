/* chat_template.h — the prompt formats of the common chat model families, recognised from a GGUF's
 * tokenizer.chat_template (a Jinja text we do not execute: each family's markers identify it) or
 * chosen by name, and rendered in C.
 *
 *   chatml   <|im_start|>ROLE\nTEXT<|im_end|>\n ... <|im_start|>assistant\n   (Qwen, many others)
 *   llama2   [INST] <<SYS>>\nSYS\n<</SYS>>\n\nUSER [/INST] ANSWER </s><s>[INST] ...
 *   llama3   <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|> ...
 *   mistral  [INST] USER [/INST]ANSWER</s>[INST] ...                  (system folded into USER)
 *   zephyr   <|system|>\nTEXT</s>\n<|user|>\nTEXT</s>\n<|assistant|>\n
 *   gemma    <start_of_turn>user\nTEXT<end_of_turn>\n<start_of_turn>model\n  (system folded)
 *   phi3     <|system|>\nTEXT<|end|>\n<|user|>\nTEXT<|end|>\n<|assistant|>\n
 *
 * The model's BOS is not written: the supervisor prepends it when the tokenizer asks for it.
 * Special-token texts in the rendered prompt become single tokens (the supervisor tokenizes with
 * parse_special). Each family names its end-of-turn text; generation stops at that token. */
#ifndef PI_APID_CHAT_TEMPLATE_H
#define PI_APID_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

enum chat_family { CHAT_CHATML = 0, CHAT_LLAMA2, CHAT_LLAMA3, CHAT_MISTRAL, CHAT_ZEPHYR, CHAT_GEMMA, CHAT_PHI3,
                   CHAT_FAMILY_COUNT };

struct chat_msg {
    const char *role;     /* "system", "developer" (as system), "user", "assistant" */
    const char *content;
};

/* "chatml", ... (the list above); NULL for an invalid family. */
const char *chat_family_name(enum chat_family f);
/* The family of a name (case-insensitive; "qwen" = chatml), or -1. */
int chat_family_from_name(const char *name);
/* Recognise a Jinja template (NULL or "" allowed). Returns the family, or -1 when unrecognised. */
int chat_family_detect(const char *jinja);
/* The text of the family's end-of-turn token ("<|im_end|>", "</s>", ...). */
const char *chat_family_eot(enum chat_family f);
/* Names of every family, comma-separated, for messages. */
const char *chat_family_list(void);

/* Render messages (roles checked: -PI_E_INVAL naming the bad one) with the assistant's turn opened
 * at the end. *out is malloc'd, NUL-terminated. */
int chat_render(enum chat_family f, const struct chat_msg *msgs, size_t n, char **out);

#endif
