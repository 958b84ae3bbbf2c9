/* dataplane.c — shared start-up of the data-plane stages. */
#include "dataplane.h"

#include <errno.h>
#include <signal.h>

#include "pi_err.h"

int dataplane_open(struct stage_rt *rt, struct pi_model **m, struct shm_seg *act_seg, struct act_view *act)
{
    int rc;
    if ((rc = stage_attach_weights(rt, false, -1)) || (rc = model_load_image(m, rt->image, rt->image_size)))
        return rc;
    if ((rc = shm_attach(act_seg, rt->instance, "act", PI_SEG_KIND_ACT, 0)) || (rc = act_view_attach(act, act_seg)))
        return rc;
    const struct act_hdr *ah = act->hdr;
    const struct pi_hparams *hp = &(*m)->hp;
    if (ah->n_layer != hp->n_layer || ah->n_embd != hp->n_embd || ah->n_ff != hp->n_ff)
        return pi_fail(PI_E_FORMAT, "%s: act segment is for %d layers x %d x %d, the model has %d x %d x %d",
                       rt->name, ah->n_layer, ah->n_embd, ah->n_ff, hp->n_layer, hp->n_embd, hp->n_ff);
    return 0;
}

bool dataplane_stage_alive(const struct pi_ctl *ctl, enum pi_stage s)
{
    /* acquire: pairs with the stage's release store of READY (stage_set_ready) */
    if (atomic_load_explicit(&ctl->stages[s].state, memory_order_acquire) != PI_STAGE_READY)
        return false;
    const int32_t pid = atomic_load_explicit(&ctl->stages[s].pid, memory_order_relaxed);
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}
