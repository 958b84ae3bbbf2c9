/* pwri_testmodel.h — tiny random llama/qwen2/bamboo models written as PowerInfer (PWRI) or plain GGUF
 * files for the sparse-core and backend tests: attention, embeddings, FFN and predictor weights of
 * chosen types (kept here already rounded to them, so an f64 reference sees exactly the stored values), optional ffn_down and
 * ffn_down_t, a predictor of a chosen kind, act_freq, and deliberate corruptions. */
#ifndef PI_PWRI_TESTMODEL_H
#define PI_PWRI_TESTMODEL_H

#include <stdbool.h>
#include <stdint.h>

#define PWRI_MAX_LAYERS 4

enum pwri_pred {
    PRED_NONE,  /* no fc1/fc2 (plain files) */
    PRED_EXACT, /* fc1 = [I; -I], fc2 = [g ⊙ w, -(g ⊙ w)]: logit_i = Σ_k gate_ik w_k h_k, the sign of gate_i · ffn_norm(h) */
    PRED_ON,    /* random fc1, fc2 >= 0: every neuron predicted active (threshold 0) */
    PRED_OFF,   /* fc1 = [I; -I], fc2 < 0: no neuron predicted active */
    PRED_RANDOM,/* random fc1, fc2 of rank 32: about half active */
};

enum pwri_bad { BAD_NONE, BAD_NO_FC1, BAD_FC2_SHAPE, BAD_FC1_SHAPE, BAD_NO_DOWN_T };

struct pwri_cfg {
    const char *arch;  /* "llama" or "bamboo" */
    bool pwri;         /* PWRI magic (else GGUF) */
    int n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim;
    uint32_t ffn_type; /* enum pi_type of gate, up, down, down_t */
    bool down, down_t; /* which down projections to write */
    enum pwri_pred pred;
    bool act_freq;
    bool tied;
    float threshold;   /* powerinfer.sparse_threshold, written when set_threshold */
    bool set_threshold;
    enum pwri_bad bad;
    /* (zero = the old defaults) type of token_embd, output and the attention matrices; type of
     * fc1/fc2; q/k/v biases (qwen2); pinfer.ffn_activation (e.g. "relu"; NULL: none written) */
    uint32_t mat_type, pred_type;
    bool bias;
    const char *act;
};

struct pwri_weights {
    int n_vocab, rank;
    float *emb, *out, *out_norm;
    float *attn_norm[PWRI_MAX_LAYERS], *wq[PWRI_MAX_LAYERS], *wk[PWRI_MAX_LAYERS], *wv[PWRI_MAX_LAYERS],
        *wo[PWRI_MAX_LAYERS];
    float *bq[PWRI_MAX_LAYERS], *bk[PWRI_MAX_LAYERS], *bv[PWRI_MAX_LAYERS]; /* cfg.bias */
    float *ffn_norm[PWRI_MAX_LAYERS];
    float *gate[PWRI_MAX_LAYERS], *up[PWRI_MAX_LAYERS]; /* (n_ff, n_embd) */
    float *down[PWRI_MAX_LAYERS];                       /* (n_embd, n_ff) */
    float *fc1[PWRI_MAX_LAYERS];                        /* (rank, n_embd) */
    float *fc2[PWRI_MAX_LAYERS];                        /* (n_ff, rank) */
    float *act_freq[PWRI_MAX_LAYERS];                   /* (n_ff) */
};

void pwri_make(const struct pwri_cfg *c, struct pwri_weights *w, uint64_t seed);
void pwri_free(const struct pwri_cfg *c, struct pwri_weights *w);
/* Write the model; w's weights become exactly the values the file stores. */
void pwri_write(const char *path, const struct pwri_cfg *c, struct pwri_weights *w);

/* f64 reference of one FFN: y (n_embd) = down · act(gate · n, up · n), n = rmsnorm(h) * ffn_norm;
 * act_out (n_ff, may be NULL) receives the activations. */
void pwri_ref_ffn(const struct pwri_cfg *c, const struct pwri_weights *w, int layer, const float *h, double eps,
                  double *y, double *act_out);

#endif
