/* loaderd — owns the model file: reads it into the instance's "weights" segment (load.c), marks
 * itself READY, then keeps its heartbeat until stopped. A restarted loaderd finds the same file
 * already loaded and re-attaches without reading (loader_load). */
#include "load.h"
#include "pi_err.h"
#include "stage.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

#define LOADERD_ATTACH_POLL_MS 10   /* retry period while the supervisor has not published weights */
#define LOADERD_IDLE_MS STAGE_HEARTBEAT_MS /* how quickly an idle loaderd notices a stop */

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool load_cancel(void *arg) { return stage_should_stop(arg); }

/* Attach the weights segment writable. Not stage_attach_weights: that waits for READY, which is
 * ours to set. The supervisor creates and publishes the segment before it spawns us, but wait a
 * little in case it is still publishing. */
static int attach_weights(struct stage_rt *rt, struct loader_weights *w)
{
    uint64_t deadline = stage_now_ns() + (uint64_t)STAGE_ATTACH_TIMEOUT_MS * 1000000u;
    int rc;
    while ((rc = shm_attach(&rt->weights_seg, rt->instance, LOADER_SEG_WEIGHTS, PI_SEG_KIND_WEIGHTS, 0)) == -EAGAIN ||
           rc == -ENOENT) {
        if (stage_now_ns() > deadline || stage_should_stop(rt))
            return rc;
        sleep_ms(LOADERD_ATTACH_POLL_MS);
    }
    if (rc)
        return rc;
    if ((rc = loader_weights_view(&rt->weights_seg, w)) != 0)
        return rc;
    rt->winfo = w->info;
    rt->image = w->image;
    rt->image_size = w->info->file_size;
    return 0;
}

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
    if ((rc = attach_weights(&rt, &w)) != 0)
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
    if ((rc = loader_load(&w, rt.ctl->model_path, &prog, &outcome)) != 0)
        goto fail;
    stage_set_ready(&rt);
    while (!stage_should_stop(&rt))
        sleep_ms(LOADERD_IDLE_MS);
    shm_detach(&rt.weights_seg);
    stage_fini(&rt);
    return 0;

fail:
    fprintf(stderr, "loaderd: %s: %s\n", pi_strerror(rc), pi_errmsg());
    stage_fail(&rt, rc, pi_errmsg());
    shm_detach(&rt.weights_seg);
    stage_fini(&rt);
    return 1;
}
