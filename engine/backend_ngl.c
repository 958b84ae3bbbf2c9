/* backend_ngl.c — dense partial offload, llama.cpp's -ngl N: the first N whole layers on the CUDA
 * backend (opened with n_gpu_layers = N: only those layers' weights and KV cache on the device),
 * the others, and the output layer, on the CPU backend (weights read in place from the mapping).
 * One backend to the evaluator: each op goes to the backend that holds its layer, and the residual
 * stream moves to the host once per step, before the first host layer's attention. gpud runs it
 * for -ngl and for a --vram-budget whose non-FFN parts do not fit (the whole-layer fallback). */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "pi_err.h"

struct be {
    const struct pi_model *m;
    const struct be_ops *dops, *hops; /* device (cuda), host (cpu) */
    struct be *dev, *host;
    int32_t n_dev;   /* layers on the device: 0 < n_dev < n_layer */
    int32_t cur;     /* layer of the last attn: set_mask/get_mask/get_h follow it */
    bool on_host;    /* x has moved to the host this step */
    float *h;        /* (n_batch, n_embd) the hand-over */
    int32_t n_batch;
};

static bool is_dev(const struct be *b, int layer) { return layer < b->n_dev; }

static void ngl_close(struct be *b)
{
    if (!b)
        return;
    if (b->dev)
        b->dops->close(b->dev);
    if (b->host)
        b->hops->close(b->host);
    free(b->h);
    free(b);
}

static int ngl_open(struct be **out, const struct pi_model *m, const struct be_params *p)
{
    return be_ngl_open_on(out, m, p, be_find("cuda"));
}

int be_ngl_open_on(struct be **out, const struct pi_model *m, const struct be_params *p, const struct be_ops *dev)
{
    const int32_t L = m->hp.n_layer;
    if (p->n_gpu_layers <= 0 || p->n_gpu_layers >= L)
        return pi_fail(PI_E_INVAL, "-ngl backend: %d layers on the device of %d (1..%d)", p->n_gpu_layers, L, L - 1);
    struct be *b = calloc(1, sizeof *b);
    if (!b)
        return pi_fail(PI_E_NOMEM, "-ngl backend: out of memory");
    b->m = m;
    b->n_dev = p->n_gpu_layers;
    b->n_batch = p->n_batch > 0 ? p->n_batch : 64;
    b->dops = dev;
    b->hops = &be_cpu_ops;
    int rc = 0;
    if (!b->dops)
        rc = pi_fail(PI_E_UNSUPPORTED, "-ngl: the CUDA backend is not built in");
    if (!rc && !(b->h = malloc((size_t)b->n_batch * (size_t)m->hp.n_embd * sizeof *b->h)))
        rc = pi_fail(PI_E_NOMEM, "-ngl backend: out of memory");
    struct be_params dp = *p, hp = *p;
    dp.on_device = hp.on_device = NULL; /* whole layers on each side */
    hp.n_gpu_layers = 0;
    if (!rc)
        rc = b->dops->open(&b->dev, m, &dp);
    if (!rc)
        rc = b->hops->open(&b->host, m, &hp);
    if (rc) {
        ngl_close(b);
        return rc;
    }
    *out = b;
    return 0;
}

static void ngl_mem(const struct be *b, struct be_mem *out) { b->dops->mem(b->dev, out); }
static int32_t ngl_n_ctx(const struct be *b) { return b->hops->n_ctx(b->host); }
static int32_t ngl_n_seq(const struct be *b) { return b->hops->n_seq(b->host); }

static int ngl_embed(struct be *b, const struct pi_batch *bt)
{
    b->on_host = false;
    b->cur = 0;
    int rc = b->dops->embed(b->dev, bt);
    return rc ? rc : b->hops->embed(b->host, bt); /* the host side's batch checks; its x is replaced below */
}

static int ngl_attn(struct be *b, int layer, const struct pi_batch *bt)
{
    b->cur = layer;
    if (is_dev(b, layer))
        return b->dops->attn(b->dev, layer, bt);
    if (!b->on_host) { /* the residual stream to the host, once a step */
        int rc = b->dops->get_h(b->dev, bt->n, b->h);
        if (rc)
            return rc;
        memcpy(be_cpu_x(b->host), b->h, (size_t)bt->n * (size_t)b->m->hp.n_embd * sizeof *b->h);
        b->on_host = true;
    }
    return b->hops->attn(b->host, layer, bt);
}

static int ngl_predict(struct be *b, int layer, int32_t n)
{
    return is_dev(b, layer) ? b->dops->predict(b->dev, layer, n) : b->hops->predict(b->host, layer, n);
}

static int ngl_set_mask(struct be *b, int32_t n, const uint8_t *mask)
{
    return is_dev(b, b->cur) ? b->dops->set_mask(b->dev, n, mask) : b->hops->set_mask(b->host, n, mask);
}

static int ngl_get_mask(struct be *b, int32_t n, uint8_t *mask)
{
    return is_dev(b, b->cur) ? b->dops->get_mask(b->dev, n, mask) : b->hops->get_mask(b->host, n, mask);
}

static int ngl_get_h(struct be *b, int32_t n, float *h)
{
    return is_dev(b, b->cur) ? b->dops->get_h(b->dev, n, h) : b->hops->get_h(b->host, n, h);
}

static int ngl_ffn(struct be *b, const struct pi_layer_weights *w, int32_t n, bool sparse, struct be_ffn_count *cnt)
{
    return is_dev(b, w->layer) ? b->dops->ffn(b->dev, w, n, sparse, cnt) : b->hops->ffn(b->host, w, n, sparse, cnt);
}

static int ngl_ffn_add(struct be *b, int layer, int32_t n, const float *y_host)
{
    return is_dev(b, layer) ? b->dops->ffn_add(b->dev, layer, n, y_host) : b->hops->ffn_add(b->host, layer, n, y_host);
}

static int ngl_output(struct be *b, const struct pi_batch *bt, float *logits)
{
    return b->hops->output(b->host, bt, logits);
}

static int ngl_seq_clear(struct be *b, int32_t seq)
{
    int rc = b->dops->seq_clear(b->dev, seq);
    return rc ? rc : b->hops->seq_clear(b->host, seq);
}

static int ngl_sync(struct be *b) { return b->dops->sync ? b->dops->sync(b->dev) : 0; }
static void ngl_idle(struct be *b) { b->hops->idle(b->host); }

const struct be_ops be_ngl_ops = {
    .name = "cuda-ngl",
    .open = ngl_open,
    .close = ngl_close,
    .mem = ngl_mem,
    .n_ctx = ngl_n_ctx,
    .n_seq = ngl_n_seq,
    .embed = ngl_embed,
    .attn = ngl_attn,
    .predict = ngl_predict,
    .set_mask = ngl_set_mask,
    .get_mask = ngl_get_mask,
    .get_h = ngl_get_h,
    .ffn = ngl_ffn,
    .ffn_add = ngl_ffn_add,
    .output = ngl_output,
    .topk = NULL,
    .seq_clear = ngl_seq_clear,
    .sync = ngl_sync,
    .idle = ngl_idle,
};
