/* apid.c — the stage's life: attach ctl (heartbeat), listen at once (so /health says 503 while the
 * instance loads), load the tokenizer and chat template from the weights image when it is READY,
 * serve until the instance stops. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apid.h"
#include "gguf.h"
#include "model.h"
#include "pi_err.h"
#include "tokenizer.h"

#define LOOP_TICK_MS 100

/* The template: --chat-template, else the model's tokenizer.chat_template if we recognise it, else
 * ChatML with a warning (in the log and in /v1/models). */
static void choose_template(struct apid *a)
{
    const char *jinja = NULL;
    (void)gguf_get_str(a->model->gguf, "tokenizer.chat_template", &jinja);
    int f = -1;
    if (a->cfg.chat_template[0]) {
        f = chat_family_from_name(a->cfg.chat_template);
        snprintf(a->template_source, sizeof a->template_source, "flag");
    } else if ((f = chat_family_detect(jinja)) >= 0) {
        snprintf(a->template_source, sizeof a->template_source, "model");
    } else {
        f = CHAT_CHATML;
        snprintf(a->template_source, sizeof a->template_source, "fallback");
        snprintf(a->template_warning, sizeof a->template_warning, "%s; using chatml (choose one with --chat-template)",
                 jinja ? "the model's chat template is not one we recognise" : "the model has no chat template");
        fprintf(stderr, "apid: warning: %s\n", a->template_warning);
    }
    a->family = (enum chat_family)f;
    const char *eot = chat_family_eot(a->family);
    a->eot_id = tok_lookup(a->model->tok, eot, strlen(eot));
    fprintf(stderr, "apid: chat template %s (%s), end of turn %s = token %d\n", chat_family_name(a->family),
            a->template_source, eot, (int)a->eot_id);
}

static void *loader_main(void *arg)
{
    struct apid *a = arg;
    int rc = stage_attach_weights(&a->rt, false, -1);
    if (!rc)
        rc = model_load_image(&a->model, a->rt.image, (size_t)a->rt.image_size);
    if (rc) {
        stage_fail(&a->rt, rc, "loading the tokenizer");
        return NULL;
    }
    choose_template(a);
    /* release: handlers that see ready (acquire) see the model and template set above */
    atomic_store_explicit(&a->ready, true, memory_order_release);
    fprintf(stderr, "apid: model '%s' ready\n", a->model_id);
    return NULL;
}

static void set_model_id(struct apid *a)
{
    char path[PI_PATH_MAX];
    snprintf(path, sizeof path, "%s", a->conn.ctl->model_path);
    char *base = basename(path);
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        base[n - 5] = '\0';
    snprintf(a->model_id, sizeof a->model_id, "%s", base);
}

int apid_run(struct apid *a, const char *instance)
{
    char *sargv[] = { "apid", "--instance", (char *)instance, NULL };
    pthread_t loader;
    bool loader_started = false;
    pthread_mutex_init(&a->mu, NULL);
    metrics_init(&a->met);
    a->eot_id = -1;
    a->created = time(NULL);
    int rc = stage_init(&a->rt, PI_STAGE_APID, 3, sargv);
    if (rc) {
        fprintf(stderr, "apid: %s: %s\n", pi_strerror(rc), pi_errmsg());
        goto out;
    }
    if ((rc = pic_open(&a->conn, instance)))
        goto fail;
    set_model_id(a);
    if ((rc = apid_reaper_start(a)))
        goto fail;
    if ((rc = apid_server_start(a)))
        goto fail;
    a->listened = true;
    if (pthread_create(&loader, NULL, loader_main, a) == 0)
        loader_started = true;
    fprintf(stderr, "apid: listening on http://%s%s%s:%d/ (model %s, api key %s, queue %d, timeout %d s)\n",
            strchr(a->cfg.host, ':') ? "[" : "", a->cfg.host, strchr(a->cfg.host, ':') ? "]" : "", a->cfg.port,
            a->model_id, a->cfg.api_key[0] ? "required" : "none", a->cfg.max_queue, a->cfg.timeout_s);
    stage_set_ready(&a->rt);
    while (!stage_should_stop(&a->rt)) {
        struct timespec ts = { 0, LOOP_TICK_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "apid: stopping\n");
    goto out;
fail:
    stage_fail(&a->rt, rc, a->listened ? "serve" : "start");
out:
    apid_server_stop(a);
    if (loader_started)
        pthread_join(loader, NULL); /* returns: a stop makes stage_attach_weights give up */
    apid_reaper_stop(a);
    model_free(a->model);
    pic_close(&a->conn);
    stage_fini(&a->rt);
    metrics_fini(&a->met);
    return rc;
}
