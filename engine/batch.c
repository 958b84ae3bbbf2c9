/* batch.c — the owned batch buffer (batch.h). */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

#include "pi_err.h"

int batch_buf_init(struct pi_batch_buf *b, int32_t cap)
{
    memset(b, 0, sizeof *b);
    if (cap <= 0)
        return pi_fail(PI_E_INVAL, "batch: capacity %d", cap);
    b->tok = malloc((size_t)cap * sizeof *b->tok);
    b->pos = malloc((size_t)cap * sizeof *b->pos);
    b->seq = malloc((size_t)cap * sizeof *b->seq);
    b->logits = malloc((size_t)cap);
    if (!b->tok || !b->pos || !b->seq || !b->logits) {
        batch_buf_fini(b);
        return pi_fail(PI_E_NOMEM, "batch: out of memory for %d tokens", cap);
    }
    b->cap = cap;
    return 0;
}

void batch_buf_fini(struct pi_batch_buf *b)
{
    free(b->tok);
    free(b->pos);
    free(b->seq);
    free(b->logits);
    memset(b, 0, sizeof *b);
}

int batch_buf_add(struct pi_batch_buf *b, int32_t tok, int32_t pos, int32_t seq, bool logits)
{
    if (b->n >= b->cap)
        return pi_fail(PI_E_RANGE, "batch: full at %d tokens", b->cap);
    b->tok[b->n] = tok;
    b->pos[b->n] = pos;
    b->seq[b->n] = seq;
    b->logits[b->n] = logits;
    b->n++;
    return 0;
}

struct pi_batch batch_view(const struct pi_batch_buf *b)
{
    return (struct pi_batch){ .n = b->n, .tok = b->tok, .pos = b->pos, .seq = b->seq, .logits = b->logits };
}

int32_t batch_n_out(const struct pi_batch *b)
{
    if (!b->logits)
        return b->n > 0;
    int32_t n = 0;
    for (int32_t i = 0; i < b->n; i++)
        n += b->logits[i] != 0;
    return n;
}
