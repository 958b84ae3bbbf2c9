/* loaderd — owns the model file: reads it into the instance's "weights" segment (load.c), marks
 * itself READY, then serves the disk tier's reads into cpud's neuron cache (serve.c) until stopped.
 * A restarted loaderd finds the same file already loaded and re-attaches without reading
 * (loader_load), and re-attaches to the neuron cache. */
#include "load.h"
#include "serve.h"
#include "pi_err.h"
#include "stage.h"

#include <stdio.h>
#include <time.h>

#define LOADERD_IDLE_MS STAGE_HEARTBEAT_MS /* how quickly an idle loaderd notices a stop */

static bool load_cancel(void *arg) { return stage_should_stop(arg); }

int main(int argc, char **argv)
{
    struct stage_rt rt;
    struct loader_weights w;
    enum loader_outcome outcome;
    int rc = stage_init(&rt, PI_STAGE_LOADERD, argc, argv);
    if (rc) {
        fprintf(stderr, "loaderd: %s: %s\n", pi_strerror(rc), pi_errmsg());
        return 1;
    }
    /* writable: returns without waiting for READY, which is ours to set */
    const char *what = "attach weights";
    if ((rc = stage_attach_weights(&rt, true, STAGE_ATTACH_TIMEOUT_MS)) != 0 ||
        (rc = loader_weights_view(&rt.weights_seg, &w)) != 0)
        goto fail;
    struct loader_progress prog = {
        .done_bytes = &rt.ctl->load_done_bytes,
        .total_bytes = &rt.ctl->load_total_bytes,
        .load_ns = &rt.ctl->load_ns,
        .method = rt.ctl->load_method,
        .method_cap = sizeof rt.ctl->load_method,
        .cancel = load_cancel,
        .cancel_arg = &rt,
    };
    what = "load model";
    serve_trim_decide(&rt);
    /* trimmed: the FFN rows are not even read (the load reads the dense tensors only); the punch
     * then frees their pages, which the supervisor allocated with the segment */
    const bool trimmed = atomic_load_explicit(&rt.ctl->weights_trimmed, memory_order_acquire) != 0;
    if ((rc = loader_load_except(&w, rt.ctl->model_path, &prog, trimmed ? serve_is_ffn_tensor : NULL, &outcome)) != 0)
        goto fail;
    what = "trim weights";
    if ((rc = serve_trim_punch(&rt, &w)) != 0)
        goto fail;
    rt.image = w.image;
    rt.image_size = w.info->file_size;
    stage_set_ready(&rt);
    struct serve sv;
    serve_init(&sv, &rt);
    while (!stage_should_stop(&rt))
        serve_poll(&sv, LOADERD_IDLE_MS);
    serve_fini(&sv);
    stage_fini(&rt);
    return 0;

fail:
    stage_fail(&rt, rc, what);
    stage_fini(&rt);
    return 1;
}
