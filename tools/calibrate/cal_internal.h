/* cal_internal.h — the pieces of `pictl calibrate` shared between its files:
 *
 *   record.c      run the model over the calibration text and keep, per layer, the FFN inputs h and
 *                 which neurons fired (cal_rec)
 *   gemm.c        the matrix-product backend the trainer calls (OpenBLAS, or a scalar reference;
 *                 a GPU backend plugs in the same struct)
 *   train.c       per-layer predictor training, logit thresholds, evaluation (cal_pred)
 *   pwri_write.c  the PowerInfer GGUF (magic PWRI) writer
 *   report_svg.c  the SVG report
 *   progress.c    the progress bar on stderr
 *   calibrate.c   the driver that ties them together (calibrate.h is its public face) */
#ifndef PI_CAL_INTERNAL_H
#define PI_CAL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pi_model;
struct gguf_file;

/* ---- progress (progress.c) ---- */

/* A one-line bar redrawn in place when stderr is a terminal; otherwise one plain line per phase
 * (logs and CI output stay readable). quiet prints nothing. */
struct cal_progress {
    bool tty, quiet, open;
    int last_permille;
    double t0_ms, last_draw_ms;
    char label[96];
};
void prog_init(struct cal_progress *p, bool quiet);
void prog_begin(struct cal_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void prog_update(struct cal_progress *p, uint64_t done, uint64_t total);
/* Ends the phase; the message (may be NULL) replaces the bar. */
void prog_end(struct cal_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- GEMM backend (gemm.c) ---- */

/* C (M, N) = alpha · op(A) (M, K) · op(B) (K, N) + beta · C, all row-major f32; op(X) = X^T when the
 * flag is set (then X is stored (K, M) resp. (N, K)). lda/ldb/ldc are the row strides as stored. */
typedef void (*cal_sgemm_fn)(void *self, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                             const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
struct cal_gemm {
    const char *name;
    cal_sgemm_fn sgemm;
    void *self;
};
/* OpenBLAS with n_threads threads. */
void cal_gemm_blas(struct cal_gemm *g, int n_threads);
/* The scalar reference (tests compare every backend against it). */
void cal_gemm_ref(struct cal_gemm *g);

/* ---- recording (record.c) ---- */

/* Per layer, rows [0, n_train) are training tokens and [n_train, n_rows) held-out tokens. */
struct cal_rec {
    int32_t n_layer, n_embd, n_ff;
    int32_t n_rows, n_train;
    size_t mask_stride; /* bytes of one token's fired mask: ceil(n_ff / 8) */
    float **h;          /* [layer] (n_rows, n_embd): FFN input before ffn_norm */
    uint8_t **fired;    /* [layer] (n_rows, mask_stride): bit j set iff neuron j's activation != 0 */
    uint64_t **count;   /* [layer] (n_ff): tokens in which the neuron fired, over all rows */
    /* hook state: rows of the chunk being evaluated start at row_base */
    int32_t row_base, row_end;
};

static inline bool cal_fired(const struct cal_rec *r, int layer, int32_t row, int32_t j)
{
    return (r->fired[layer][(size_t)row * r->mask_stride + (size_t)(j >> 3)] >> (j & 7)) & 1;
}

int cal_rec_init(struct cal_rec *r, int32_t n_layer, int32_t n_embd, int32_t n_ff, int32_t n_train, int32_t n_held);
void cal_rec_fini(struct cal_rec *r);
/* Bytes cal_rec_init would allocate (to report before doing it). */
uint64_t cal_rec_bytes(int32_t n_layer, int32_t n_embd, int32_t n_ff, int32_t n_rows);

/* Fill r from the token stream toks (the text without BOS): r->n_rows tokens are taken as chunks of
 * `chunk` positions spread evenly over the stream, each evaluated from an empty cache and starting
 * with BOS when the model uses one; held-out chunks are interleaved with training chunks so that both
 * sample the whole text. Fails with -PI_E_RANGE when the stream is too short. */
int cal_record(struct cal_rec *r, const struct pi_model *m, const int32_t *toks, size_t n_toks, int32_t chunk,
               int32_t n_threads, struct cal_progress *prog);

/* ---- predictor training (train.c) ---- */

/* A predictor: logits (n_ff) = w2 · relu(w1 · h); neuron j predicted active iff logit_j >= thr. */
struct cal_pred {
    int32_t rank, n_embd, n_ff;
    float *w1; /* (rank, n_embd): fc1, one row per hidden unit */
    float *w2; /* (n_ff, rank): fc2, one row per neuron */
};
int cal_pred_init(struct cal_pred *p, int32_t rank, int32_t n_embd, int32_t n_ff);
void cal_pred_fini(struct cal_pred *p);

struct cal_train_params {
    int32_t epochs;
    int32_t batch;     /* tokens per Adam step */
    float lr;          /* Adam step size */
    float pos_weight;  /* weight of the positive (fired) class in the loss; <= 0: from the layer's rate */
    float init_scale;  /* the gate initialisation's logits are multiplied by this */
    double select_recall; /* > 0: early stopping on the held-out rows at this recall (train.c) */
    uint64_t seed;
};
void cal_train_defaults(struct cal_train_params *p);

/* Train p (already sized with its rank) on the training rows of one layer. gate (n_ff, n_embd): the
 * layer's gate rows times the ffn_norm weight, to start from (init_gate.c); NULL starts from noise. */
int cal_train(const struct cal_gemm *g, const struct cal_rec *r, int layer, const float *gate,
              const struct cal_train_params *tp, struct cal_pred *p, struct cal_progress *prog);
/* init_gate.c: p = the best rank-(r/2) linear map of the gate pre-activations in ± pairs, in the
 * trainer's input space x = h ⊙ inv_scale. */
int cal_init_gate(const struct cal_gemm *g, const struct cal_rec *r, int layer, const float *gate,
                  const float *inv_scale, struct cal_pred *p, uint64_t *seed);

/* Counts of a predictor on a range of rows at one threshold. */
struct cal_stats {
    uint64_t tp, fp, fn, n; /* n = rows × n_ff */
};
static inline double cal_recall(const struct cal_stats *s)
{
    return s->tp + s->fn ? (double)s->tp / (double)(s->tp + s->fn) : 1.0;
}
static inline double cal_precision(const struct cal_stats *s)
{
    return s->tp + s->fp ? (double)s->tp / (double)(s->tp + s->fp) : 1.0;
}
static inline double cal_pred_frac(const struct cal_stats *s) { return s->n ? (double)(s->tp + s->fp) / (double)s->n : 0; }
static inline double cal_true_frac(const struct cal_stats *s) { return s->n ? (double)(s->tp + s->fn) / (double)s->n : 0; }

/* The largest logit threshold at which the recall over rows [row0, row1) is at least `recall`;
 * *logit_std (may be NULL) is the standard deviation of all logits there (the scale of "small"). */
int cal_threshold(const struct cal_gemm *g, const struct cal_rec *r, int layer, int32_t row0, int32_t row1,
                  const struct cal_pred *p, double recall, float *thr, float *logit_std);
int cal_evaluate(const struct cal_gemm *g, const struct cal_rec *r, int layer, int32_t row0, int32_t row1,
                 const struct cal_pred *p, float thr, struct cal_stats *st);

/* ---- PowerInfer writer (pwri_write.c) ---- */

struct pwri_layer {
    const struct cal_pred *pred; /* weights as they are to be stored (threshold already folded in) */
    const float *act_freq;       /* (n_ff) */
};
struct pwri_params {
    uint32_t pred_type;        /* PI_TYPE_F16 or PI_TYPE_F32 */
    float threshold;           /* powerinfer.sparse_threshold */
    uint32_t tokens_train, tokens_heldout;
    const char *data_names;    /* pinfer.calibration.data */
    float recall_target;
    const float *layer_recall; /* (n_layer) held-out recall, stored as pinfer.calibration.recall */
};
/* How ffn_down_t will be stored for a source ffn_down type: same type when a transpose can be exact
 * (f32, f16, bf16) or requantized (q8_0, q4_0: dequantize, transpose, quantize rows of n_embd);
 * *exact tells which. -PI_E_UNSUPPORTED for other types. */
int pwri_down_t_type(uint32_t src_type, int64_t n_embd, uint32_t *out_type, bool *exact);
/* Write src's keys and tensors with every blk.N.ffn_down.weight replaced by blk.N.ffn_down_t.weight,
 * plus blk.N.fc1.weight, blk.N.fc2.weight, blk.N.act_freq, to path (streamed, one tensor at a time). */
int pwri_write(const char *path, const struct gguf_file *src, int32_t n_layer, int32_t n_embd, int32_t n_ff,
               const struct pwri_layer *layers, const struct pwri_params *pp, struct cal_progress *prog);

/* ---- report (report_svg.c) ---- */

struct cal_layer_report {
    int32_t rank;
    double recall, precision, pred_frac, true_frac; /* held out, with the stored weights */
    double eval_recall, eval_pred_frac, eval_true_frac; /* on --eval text (< 0 when none) */
    double layer_thr;      /* the layer's own threshold before folding */
    uint64_t pred_bytes;   /* fc1 + fc2 as stored */
    const float *act_freq; /* (n_ff) */
};
int cal_report_svg(const char *path, const char *model_name, int32_t n_layer, int32_t n_ff,
                   const struct cal_layer_report *L, double recall_target);

#endif
