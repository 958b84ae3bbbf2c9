/* pictl status — an instance's state, read straight from its ctl segment (read-only), so it works
 * while the supervisor is busy or even dead. Plain text in Redis INFO style ("# Section",
 * "key:value", one line per stage "gpud:pid=...,state=ready,..."), or --json. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "instance.h"
#include "run_disk_status.h"
#include "pi_err.h"
#include "pictl.h"
#include "stage.h"

#define NS_PER_MS 1e6
#define MIB (1024.0 * 1024.0)

static long long rss_bytes(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long long size, resident;
    int n = fscanf(f, "%lld %lld", &size, &resident);
    fclose(f);
    return n == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}

static const char *exit_text(int status, char *buf, size_t cap)
{
    if (WIFEXITED(status))
        snprintf(buf, cap, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "signal %d", WTERMSIG(status));
    else
        snprintf(buf, cap, "status 0x%x", (unsigned)status);
    return buf;
}

/* Strings from shared memory may be unterminated or hold invalid UTF-8 (a JSON dump would fail):
 * bound them, and replace an invalid one. */
static json_t *str_field(const char *s, size_t cap)
{
    json_t *v = json_stringn(s, strnlen(s, cap));
    return v ? v : json_string("(invalid UTF-8)");
}

/* Live predictor recall from predictord's audits (--audit-rate): totals and per layer. */
json_t *inst_audit_json(const struct pi_ctl *ctl)
{
    json_t *a = json_object(), *layers = json_array();
    uint64_t t_tok = 0, t_fired = 0, t_pred = 0, t_missed = 0;
    const int n = ctl->n_layer < PI_MAX_LAYERS ? ctl->n_layer : PI_MAX_LAYERS;
    for (int l = 0; l < n; l++) {
        const struct pi_audit_row *r = &ctl->audit[l];
        const uint64_t tok = atomic_load_explicit(&r->tokens, memory_order_relaxed),
                       fired = atomic_load_explicit(&r->fired, memory_order_relaxed),
                       pred = atomic_load_explicit(&r->predicted, memory_order_relaxed),
                       missed = atomic_load_explicit(&r->missed, memory_order_relaxed);
        t_tok += tok, t_fired += fired, t_pred += pred, t_missed += missed;
        json_array_append_new(layers, json_pack("{s:i, s:I, s:f, s:f, s:f}", "layer", l, "tokens", (json_int_t)tok,
                                                "recall", fired ? 1.0 - (double)missed / fired : 1.0,
                                                "fired_per_token", tok ? (double)fired / tok : 0.0,
                                                "predicted_per_token", tok ? (double)pred / tok : 0.0));
    }
    json_object_set_new(a, "rate", json_real(ctl->audit_rate));
    json_object_set_new(a, "tokens", json_integer((json_int_t)t_tok));
    json_object_set_new(a, "recall", json_real(t_fired ? 1.0 - (double)t_missed / t_fired : 1.0));
    json_object_set_new(a, "fired", json_integer((json_int_t)t_fired));
    json_object_set_new(a, "predicted", json_integer((json_int_t)t_pred));
    json_object_set_new(a, "missed", json_integer((json_int_t)t_missed));
    json_object_set_new(a, "layers", layers);
    return a;
}

static json_t *stage_json(const struct pi_stage_info *in, unsigned long long now)
{
    const pid_t pid = atomic_load_explicit(&in->pid, memory_order_relaxed);
    const unsigned long long started = atomic_load_explicit(&in->started_ns, memory_order_relaxed);
    const unsigned long long hb = atomic_load_explicit(&in->heartbeat_ns, memory_order_relaxed);
    const unsigned long long died = atomic_load_explicit(&in->died_ns, memory_order_relaxed);
    char ex[32];
    json_t *j = json_object();
    json_object_set_new(j, "pid", json_integer(pid));
    json_object_set_new(j, "state", json_string(inst_stage_state_name(atomic_load_explicit(&in->state, memory_order_relaxed))));
    json_object_set_new(j, "restarts", json_integer(atomic_load_explicit(&in->restarts, memory_order_relaxed)));
    json_object_set_new(j, "uptime_s", json_real(pid > 0 && started && now > started ? (now - started) / 1e9 : 0.0));
    long long rss = pid > 0 ? rss_bytes(pid) : -1;
    json_object_set_new(j, "rss_mib", json_real(rss >= 0 ? rss / MIB : 0.0));
    json_object_set_new(j, "items", json_integer((json_int_t)atomic_load_explicit(&in->items, memory_order_relaxed)));
    json_object_set_new(j, "compute_ms", json_real(atomic_load_explicit(&in->compute_ns, memory_order_relaxed) / NS_PER_MS));
    json_object_set_new(j, "wait_ms", json_real(atomic_load_explicit(&in->wait_ns, memory_order_relaxed) / NS_PER_MS));
    json_object_set_new(j, "mib_read", json_real(atomic_load_explicit(&in->bytes, memory_order_relaxed) / MIB));
    json_object_set_new(j, "heartbeat_age_ms", json_real(pid > 0 && hb && now > hb ? (now - hb) / NS_PER_MS : -1.0));
    json_object_set_new(j, "fallbacks", json_integer((json_int_t)atomic_load_explicit(&in->fallbacks, memory_order_relaxed)));
    json_object_set_new(j, "stale_dropped",
                        json_integer((json_int_t)atomic_load_explicit(&in->stale_dropped, memory_order_relaxed)));
    json_object_set_new(j, "last_exit", json_string(died ? exit_text(atomic_load_explicit(&in->last_exit, memory_order_relaxed), ex, sizeof ex) : ""));
    json_object_set_new(j, "died_ago_s", json_real(died && now > died ? (now - died) / 1e9 : -1.0));
    json_object_set_new(j, "last_error", str_field(in->last_error, sizeof in->last_error));
    return j;
}

json_t *inst_status_json(const struct pi_ctl *ctl)
{
    const unsigned long long now = inst_now_ns();
    const pid_t sup = (pid_t)ctl->supervisor_pid;
    json_t *j = json_object();
    json_object_set_new(j, "instance", str_field(ctl->instance, sizeof ctl->instance));
    /* The segment outlives a supervisor killed with -9, its state frozen at whatever it was: a
     * state read from it is only true while the supervisor lives. */
    const bool alive = inst_pid_alive(sup);
    json_object_set_new(j, "state", json_string(alive ? inst_state_name(atomic_load_explicit(&ctl->state, memory_order_relaxed))
                                                      : INST_STATE_DEAD));
    json_object_set_new(j, "model", str_field(ctl->model_path, sizeof ctl->model_path));
    json_object_set_new(j, "supervisor_pid", json_integer(sup));
    json_object_set_new(j, "supervisor_alive", json_boolean(alive));
    json_object_set_new(j, "epoch", json_integer((json_int_t)atomic_load_explicit(&ctl->epoch, memory_order_relaxed)));
    json_object_set_new(j, "threads", json_integer(ctl->n_threads));
    json_object_set_new(j, "gpud_threads", json_integer(ctl->gpud_threads));
    json_object_set_new(j, "cpud_threads", json_integer(ctl->cpud_threads));
    /* where the masks really come from: a device backend predicts itself; an audit needs predictord */
    json_object_set_new(j, "predict_in", json_string(strcmp(ctl->backend_used, "cpu") && ctl->backend_used[0]
                                                         ? "device"
                                                         : ctl->audit_rate > 0.0f ? "predictord"
                                                                                  : predict_in_name(ctl->predict_in)));
    json_object_set_new(j, "ctx", json_integer(ctl->n_ctx));
    json_object_set_new(j, "backend", str_field(ctl->backend_used[0] ? ctl->backend_used : ctl->backend,
                                                sizeof ctl->backend_used));
    json_object_set_new(j, "backend_why", str_field(ctl->backend_why, sizeof ctl->backend_why));
    json_object_set_new(j, "n_layer", json_integer(ctl->n_layer));
    json_object_set_new(j, "n_embd", json_integer(ctl->n_embd));
    json_object_set_new(j, "n_ff", json_integer(ctl->n_ff));
    json_object_set_new(j, "n_vocab", json_integer(ctl->n_vocab));
    json_object_set_new(j, "gpu_ffn_share", json_real(ctl->gpu_ffn_share));
    json_object_set_new(j, "error", str_field(ctl->error, sizeof ctl->error));

    const double load_ms = atomic_load_explicit(&ctl->load_ns, memory_order_relaxed) / NS_PER_MS;
    const unsigned long long total = atomic_load_explicit(&ctl->load_total_bytes, memory_order_relaxed);
    json_t *load = json_object();
    json_object_set_new(load, "method", str_field(ctl->load_method, sizeof ctl->load_method));
    json_object_set_new(load, "done_bytes",
                        json_integer((json_int_t)atomic_load_explicit(&ctl->load_done_bytes, memory_order_relaxed)));
    json_object_set_new(load, "total_bytes", json_integer((json_int_t)total));
    json_object_set_new(load, "ms", json_real(load_ms));
    json_object_set_new(load, "gib_per_s", json_real(load_ms > 0 ? total / (1024.0 * MIB) / (load_ms / 1e3) : 0.0));
    json_object_set_new(j, "load", load);

    /* gpud's device memory by kind (its allocator), the plan and budget (supervisor), the hot set */
    json_t *vram = json_object();
    json_object_set_new(vram, "budget_bytes", json_integer((json_int_t)ctl->vram_budget));
    json_object_set_new(vram, "planned_bytes", json_integer((json_int_t)ctl->vram_planned));
    const uint64_t kinds[] = { ctl->vram_weights, ctl->vram_hot, ctl->vram_pred, ctl->vram_kv, ctl->vram_scratch,
                               ctl->vram_context };
    static const char *const kind_names[] = { "weights", "hot_rows", "predictors", "kv_cache", "scratch", "context" };
    uint64_t ours = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        json_object_set_new(vram, kind_names[k], json_integer((json_int_t)kinds[k]));
        ours += k + 1 < sizeof kinds / sizeof kinds[0] ? kinds[k] : 0;
    }
    json_object_set_new(vram, "allocated_bytes", json_integer((json_int_t)ours)); /* all but the context */
    json_object_set_new(vram, "device_used_bytes", json_integer((json_int_t)ctl->vram_device_used));
    json_object_set_new(vram, "hot_neurons", json_integer((json_int_t)ctl->hot_neurons));
    json_object_set_new(vram, "neurons", json_integer((json_int_t)ctl->n_layer * ctl->n_ff));
    json_object_set_new(vram, "hot_coverage", json_real(ctl->hot_coverage));
    json_object_set_new(j, "vram", vram);

    json_t *stages = json_object();
    for (int i = 0; i < PI_STAGE_COUNT; i++) {
        /* apid runs only with --http: an instance that never started it does not list it */
        if (i == PI_STAGE_APID && !atomic_load_explicit(&ctl->stages[i].started_ns, memory_order_relaxed))
            continue;
        json_object_set_new(stages, stage_name((enum pi_stage)i), stage_json(&ctl->stages[i], now));
    }
    json_object_set_new(j, "stages", stages);

    /* requests (the table), the sequences running them (slots) and the queue waiting for one */
    json_t *reqs = json_array(), *slots = json_array();
    int queued = 0;
    for (int q = 0; q < ctl->n_parallel; q++)
        json_array_append_new(slots, json_pack("{s:i, s:s}", "seq", q, "state", "free"));
    for (int i = 0; i < PI_MAX_REQUESTS; i++) {
        const struct pi_request *r = &ctl->reqs[i];
        const unsigned st = atomic_load_explicit(&r->state, memory_order_acquire);
        if (st == PI_REQ_FREE)
            continue;
        const int seq = st == PI_REQ_RUNNING ? atomic_load_explicit(&r->seq, memory_order_relaxed) : -1;
        const int n_gen = (int)atomic_load_explicit(&r->n_gen, memory_order_relaxed);
        queued += st == PI_REQ_QUEUED;
        json_array_append_new(reqs, json_pack("{s:i, s:I, s:s, s:i, s:i, s:i, s:i, s:b}", "slot", i, "id",
                                              (json_int_t)r->id, "state", inst_req_state_name(st), "seq", seq,
                                              "n_prompt", r->n_prompt, "n_gen", n_gen, "replays", (int)r->replays,
                                              "cancel", (int)atomic_load_explicit(&r->cancel, memory_order_relaxed)));
        if (seq >= 0 && seq < ctl->n_parallel)
            json_array_set_new(slots, (size_t)seq,
                               json_pack("{s:i, s:s, s:I, s:i}", "seq", seq, "state",
                                         n_gen > 0 ? "decoding" : "prefilling",
                                         "request", (json_int_t)r->id, "tokens", r->n_prompt + n_gen));
    }
    json_object_set_new(j, "requests", reqs);
    json_object_set_new(j, "parallel", json_integer(ctl->n_parallel));
    json_object_set_new(j, "slots", slots);
    json_object_set_new(j, "queued", json_integer(queued));
    json_object_set_new(j, "slot_waits",
                        json_integer((json_int_t)atomic_load_explicit(&ctl->slot_waits, memory_order_relaxed)));
    json_object_set_new(j, "audit", inst_audit_json(ctl));
    json_t *disk = run_disk_status_json(ctl);
    if (disk)
        json_object_set_new(j, "disk", disk);
    return j;
}

/* "key=value" of a scalar JSON value. */
static void print_scalar(FILE *out, json_t *v)
{
    if (json_is_string(v))
        fputs(json_string_value(v), out);
    else if (json_is_integer(v))
        fprintf(out, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        fprintf(out, "%.2f", json_real_value(v));
    else if (json_is_boolean(v))
        fputs(json_is_true(v) ? "yes" : "no", out);
}

static void print_section(FILE *out, const char *title, json_t *obj)
{
    const char *k;
    json_t *v;
    fprintf(out, "# %s\n", title);
    json_object_foreach(obj, k, v) {
        if (json_is_object(v) || json_is_array(v))
            continue;
        fprintf(out, "%s:", k);
        print_scalar(out, v);
        fputc('\n', out);
    }
}

static void print_text(FILE *out, json_t *st)
{
    print_section(out, "Instance", st);
    fputc('\n', out);
    print_section(out, "Load", json_object_get(st, "load"));
    fputc('\n', out);
    print_section(out, "VRAM", json_object_get(st, "vram"));
    if (json_object_get(st, "disk")) {
        fputc('\n', out);
        print_section(out, "Disk tier", json_object_get(st, "disk"));
    }
    fprintf(out, "\n# Stages\n");
    const char *name;
    json_t *stage;
    json_object_foreach(json_object_get(st, "stages"), name, stage) {
        fprintf(out, "%s:", name);
        const char *k;
        json_t *v;
        bool first = true;
        json_object_foreach(stage, k, v) {
            if (!strcmp(k, "last_error"))
                continue;
            fprintf(out, "%s%s=", first ? "" : ",", k);
            print_scalar(out, v);
            first = false;
        }
        fputc('\n', out);
        const char *err = json_string_value(json_object_get(stage, "last_error"));
        if (err && err[0])
            fprintf(out, "%s_last_error:%s\n", name, err);
    }
    fputc('\n', out);
    print_section(out, "Audit", json_object_get(st, "audit"));
    json_t *slots = json_object_get(st, "slots");
    fprintf(out, "\n# Slots\nparallel:%lld\nqueued:%lld\n", (long long)json_integer_value(json_object_get(st, "parallel")),
            (long long)json_integer_value(json_object_get(st, "queued")));
    size_t i;
    json_t *r;
    json_array_foreach(slots, i, r) {
        const char *state = json_string_value(json_object_get(r, "state"));
        if (json_object_get(r, "request"))
            fprintf(out, "seq%zu:state=%s,request=%lld,tokens=%lld\n", i, state,
                    (long long)json_integer_value(json_object_get(r, "request")),
                    (long long)json_integer_value(json_object_get(r, "tokens")));
        else
            fprintf(out, "seq%zu:state=%s\n", i, state);
    }
    json_t *reqs = json_object_get(st, "requests");
    fprintf(out, "\n# Requests\nin_flight:%zu\n", json_array_size(reqs));
    json_array_foreach(reqs, i, r) {
        fprintf(out, "slot%lld:id=%lld,state=%s,seq=%lld,n_prompt=%lld,n_gen=%lld,replays=%lld\n",
                (long long)json_integer_value(json_object_get(r, "slot")),
                (long long)json_integer_value(json_object_get(r, "id")),
                json_string_value(json_object_get(r, "state")),
                (long long)json_integer_value(json_object_get(r, "seq")),
                (long long)json_integer_value(json_object_get(r, "n_prompt")),
                (long long)json_integer_value(json_object_get(r, "n_gen")),
                (long long)json_integer_value(json_object_get(r, "replays")));
    }
}

int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = { { "name", required_argument, NULL, 'N' }, { "json", no_argument, NULL, 'j' },
                                           { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
    const char *name = INST_DEFAULT_NAME;
    bool as_json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'N')
            name = optarg;
        else if (c == 'j')
            as_json = true;
        else if (c == 'h') {
            printf("usage: pictl status [--name NAME] [--json]   state of an instance (default %s)\n",
                   INST_DEFAULT_NAME);
            return 0;
        } else
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "pictl status: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    int rc = inst_check_name(name);
    if (rc)
        return pictl_error("status", "--name", rc);
    struct shm_seg seg;
    const struct pi_ctl *ctl;
    if ((rc = inst_attach_ctl(name, &seg, &ctl))) {
        if (rc == -ENOENT) {
            fprintf(stderr, "pictl status: instance '%s' is not running\n", name);
            return 1;
        }
        return pictl_error("status", name, rc);
    }
    json_t *st = inst_status_json(ctl);
    shm_detach(&seg);
    if (!st)
        return pictl_error("status", name, -PI_E_NOMEM);
    const bool dead = !json_is_true(json_object_get(st, "supervisor_alive"));
    if (as_json) {
        char *text = json_dumps(st, JSON_INDENT(1));
        if (text)
            puts(text);
        free(text);
    } else {
        print_text(stdout, st);
    }
    if (dead)
        fprintf(stderr, "pictl status: instance '%s' is dead: its supervisor (pid %lld) is gone and nothing serves it; "
                "'pictl start' cleans it up\n", name, (long long)json_integer_value(json_object_get(st, "supervisor_pid")));
    json_decref(st);
    return dead ? 1 : 0;
}
