/* synth.h — synthetic full-size llama/ReGLU models whose FFN sparsity and hot-neuron power law are
 * chosen, not learned (pictl synth). Weights do not change decode speed; activation patterns do.
 *
 * Construction (the residual stream, dims of h = FFN input before ffn_norm):
 *   dim 0            c_t = |z_t|, a positive "bias" dimension (alone in its quant block)
 *   dims 1..31       0
 *   dims S..S+d-1    z_t: the token's direction, uniform on a sphere (S = SYNTH_SUB_OFF, d = sub_dim)
 *   dims S+d..E-1    "junk": random in the embedding, then whatever attention and the FFN add
 * Attention's output projection and the FFN down projection have zero rows for dims 0..S+d-1, so
 * every layer sees the embedding's (c_t, z_t) unchanged. Gate row i of a layer holds b_i at dim 0
 * and a random direction â_i at dims S..S+d-1, nothing else, so (ffn_norm = 1, rmsnorm scales h by
 * a positive number)
 *     neuron i fires  <=>  b_i c_t + â_i · z_t > 0  <=>  cos(â_i, z_t) > -b_i / |â_i|,
 * and with z_t uniform on the sphere cos(â_i, z_t) is distributed as one coordinate u1 of a uniform
 * unit vector in R^d, so b_i = -|â_i| Q(1 - p_i), Q the quantile of u1, fires neuron i with
 * probability p_i over tokens. p_i follows a clipped Zipf law over a random permutation of neuron
 * ranks per layer, p_i = min(1, C rank^-s), with mean 1 - sparsity. Per token, the fraction of
 * active neurons is then 1 - sparsity in expectation for every token.
 *
 * The PowerInfer file (--pwri) also has blk.N.act_freq, each neuron's p_i (the true activation
 * frequency, where pictl calibrate writes measured ones, so the split solver places the hot neurons),
 * ffn_down_t (the same down projection, transposed) and an exact
 * predictor of rank r >= 2d + 1: fc1 rows e_0, +e_{S+j}, -e_{S+j}; fc2 row i = (b_i, +â_ij, -â_ij),
 * so fc2 · relu(fc1 · h) = b_i h_0 + Σ_j â_ij h_{S+j} (relu(x) - relu(-x) = x, h_0 > 0), the gate's
 * pre-activation up to the positive rmsnorm scale. It misses only neurons whose gate value is within
 * rounding (f16 predictor weights, q8_0 activations) of zero. The gate weights it uses are the
 * dequantized stored ones, so quantizing the model does not cost recall.
 *
 * Dense and --pwri files written with the same seed, shape and type hold identical weights. */
#ifndef PI_SYNTH_H
#define PI_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#define SYNTH_SUB_OFF 32     /* first dim of the token subspace: one q4_0/q8_0 block after dim 0 */
#define SYNTH_HOT_FRAC 0.3   /* "hot" = the hottest 30 % of neurons (the brief's 30 % / 80 % law) */

struct synth_shape {
    const char *name; /* "llama-7b", "tiny", "custom" */
    int32_t n_embd, n_ff, n_layer, n_head, n_head_kv;
    int32_t n_vocab;  /* default per shape; --vocab overrides */
    int32_t n_ctx;
    int32_t rank;     /* default predictor rank per shape; --rank overrides */
};

/* "llama-7b", "llama-13b", "tiny" or "E,F,L,H,HKV". 0 or -PI_E_INVAL with a message. */
int synth_shape_parse(struct synth_shape *s, const char *spec);

struct synth_opts {
    struct synth_shape shape;
    uint32_t type;      /* weight type of the 2-D tensors (any type with a quantizer) */
    const char *mix;    /* a quantize mixture ("q4_k_m"): each 2-D tensor gets the type pictl quantize
                         * (and llama-quantize) would pick for it, type the mixture's default; NULL: type
                         * everywhere. Written directly: no F16 file to re-quantize */
    double sparsity;    /* fraction of neurons inactive per token, in (0, 1) */
    double zipf;        /* exponent s of p(rank) ∝ rank^-s */
    double hot_share;   /* > 0: choose s so that the hottest 30 % carry this share (overrides zipf) */
    bool pwri;          /* PowerInfer file: ffn_down_t + predictors */
    uint32_t pred_type; /* predictor weights: f16 (PowerInfer's, the default), f32, q8_0, q4_0 */
    uint64_t seed;
    const char *out_path;
    bool quiet;         /* no progress on stderr */
    int n_threads;      /* generation threads (>= 1) */
};

/* Defaults: 7B shape, f16 (weights and predictors), sparsity 0.9, zipf SYNTH_DEFAULT_ZIPF, seed 1, threads = online cores. */
void synth_opts_default(struct synth_opts *o);
#define SYNTH_DEFAULT_ZIPF 1.15 /* hottest 30 % carry ~80 % of activations at sparsity 0.9 (see docs) */

/* What the options imply (validated). */
struct synth_design {
    int32_t sub_dim;        /* d */
    int32_t rank;           /* predictor rank */
    double zipf;            /* s actually used */
    double p_mean;          /* 1 - sparsity */
    double hot_share;       /* expected share of activations of the hottest 30 % */
    double p_max, p_min;    /* the hottest and the coldest neuron's probability */
};
int synth_design_get(const struct synth_opts *o, struct synth_design *d);

/* Write the model (streaming; the largest buffer is one tensor). 0 or a negative code + message. */
int synth_write(const struct synth_opts *o);

/* ---- measuring a model's activations (dense forward, FFN hook) ---- */
struct synth_stats {
    int32_t n_layer, n_ff;
    int64_t n_tokens;
    double *active_frac;    /* per layer: mean over tokens of (active neurons / n_ff) */
    double *hot_share;      /* per layer: share of activations of the 30 % most active neurons */
    /* With a predictor (else -1): over all layers and tokens. */
    double recall;          /* predicted ∧ active / active */
    double predicted_frac;  /* predicted / n_ff: the neurons a sparse FFN computes per token */
    /* Bytes one decode step reads: dense (every weight but the embedding), and sparse (attention,
     * norms, output, predictors, and predicted_frac of the FFN's gate, up and down rows). */
    double dense_bytes, sparse_bytes;
    double ffn_bytes;       /* gate + up + down (or down_t) of all layers */
    double pred_bytes;      /* fc1 + fc2 of all layers (-1 without a predictor) */
};
/* Evaluate n_tokens random non-control tokens (one sequence, batches of prefill) through the dense
 * forward pass of `model_path`, counting act != 0 per neuron. The predictor (pred_eval on each
 * layer's FFN input) is `pred_path`'s, a --pwri file of the same seed and shape, or when that is
 * NULL the model's own if it is a PowerInfer file. */
int synth_measure(const char *model_path, const char *pred_path, int32_t n_tokens, uint64_t seed, int n_threads,
                  struct synth_stats *out);
void synth_stats_fini(struct synth_stats *s);

#endif
