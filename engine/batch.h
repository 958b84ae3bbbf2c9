/* batch.h — a batch of tokens from any number of sequences, the unit every evaluator step takes
 * (the shape of llama.cpp's llama_batch).
 *
 * Token i is tok[i] at position pos[i] of sequence seq[i]; logits[i] != 0 asks for its logits. The
 * tokens of one sequence appear in increasing position order, and a token's predecessors in its
 * sequence are either in the KV cache already or earlier in the same batch. */
#ifndef PI_ENGINE_BATCH_H
#define PI_ENGINE_BATCH_H

#include <stdbool.h>
#include <stdint.h>

struct pi_batch {
    int32_t n;             /* tokens */
    const int32_t *tok;    /* (n) token ids */
    const int32_t *pos;    /* (n) position in its sequence */
    const int32_t *seq;    /* (n) sequence id, 0 .. n_seq - 1 */
    const uint8_t *logits; /* (n) 1 = logits wanted (NULL: only the last token's) */
};

/* An owned, growable batch; batch_view() gives the pi_batch to evaluate. */
struct pi_batch_buf {
    int32_t n, cap;
    int32_t *tok, *pos, *seq;
    uint8_t *logits;
};

int batch_buf_init(struct pi_batch_buf *b, int32_t cap);
void batch_buf_fini(struct pi_batch_buf *b);
static inline void batch_buf_clear(struct pi_batch_buf *b) { b->n = 0; }
/* Append one token: 0, or -PI_E_RANGE when the batch is full. */
int batch_buf_add(struct pi_batch_buf *b, int32_t tok, int32_t pos, int32_t seq, bool logits);
struct pi_batch batch_view(const struct pi_batch_buf *b);

/* Does token i want logits? (NULL logits: only the last token.) */
static inline bool batch_wants(const struct pi_batch *b, int32_t i)
{
    return b->logits ? b->logits[i] != 0 : i == b->n - 1;
}
/* Number of tokens whose logits are wanted. */
int32_t batch_n_out(const struct pi_batch *b);

#endif
