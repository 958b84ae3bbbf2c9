/* client.c — one generation on a running instance, client side (see client.h). */
#include "client.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "futex.h"
#include "instance.h"
#include "pi_err.h"

#define PIC_WAIT_SLICE_MS 200 /* futex sleep slice: the supervisor's liveness is checked between */
#define PIC_BUSY_PREFIX "busy:" /* the supervisor's refusal when every slot and its queue are full */
#define PIC_TICKET_POLL_MS 20   /* a waiting request asks for its slot this often */

int pic_open(struct pic_conn *c, const char *name)
{
    memset(c, 0, sizeof *c);
    c->seg.fd = -1;
    snprintf(c->name, sizeof c->name, "%s", name);
    int rc = inst_attach_ctl(name, &c->seg, &c->ctl);
    if (rc == -ENOENT)
        rc = pi_fail(ENOENT, "instance '%s' is not running", name);
    return rc;
}

void pic_close(struct pic_conn *c)
{
    shm_detach(&c->seg);
    c->ctl = NULL;
}

/* The stream of a slot reply {"ok":true,"id":ID,"slot":I,"n_prompt":N} (reply is consumed). */
static int stream_from_reply(const struct pic_conn *c, json_t *reply, struct pic_stream *s)
{
    const json_int_t id = json_integer_value(json_object_get(reply, "id"));
    const json_int_t slot = json_integer_value(json_object_get(reply, "slot"));
    const json_int_t n_prompt = json_integer_value(json_object_get(reply, "n_prompt"));
    json_decref(reply);
    if (id <= 0 || slot < 0 || slot >= PI_MAX_REQUESTS || n_prompt <= 0 || n_prompt > PI_REQ_MAX_TOKENS)
        return pi_fail(PI_E_FORMAT, "the supervisor's reply lacks a valid id/slot/n_prompt");
    *s = (struct pic_stream){ .c = c, .r = &c->ctl->reqs[slot], .slot = (int)slot, .id = (uint64_t)id,
                              .n_prompt = (int32_t)n_prompt };
    return 0;
}

/* Ask once for a waiting request's slot: 0 with *reply holding the slot, 1 still waiting, or a
 * negative code. */
static int poll_ticket(const struct pic_conn *c, uint64_t ticket, json_t **reply)
{
    json_t *poll = json_pack("{s:s, s:I}", "cmd", "ticket", "ticket", (json_int_t)ticket);
    if (!poll)
        return pi_fail(PI_E_NOMEM, "cannot build the ticket command");
    *reply = NULL;
    int rc = inst_request(c->name, poll, INST_REQ_TIMEOUT_MS, reply);
    json_decref(poll);
    if (rc)
        return rc;
    if (!json_is_true(json_object_get(*reply, "ok"))) {
        const char *e = json_string_value(json_object_get(*reply, "error"));
        rc = pi_fail(PI_E_IO, "waiting for a slot: %s", e ? e : "refused");
        json_decref(*reply);
        *reply = NULL;
        return rc;
    }
    if (json_object_get(*reply, "slot"))
        return 0;
    json_decref(*reply);
    *reply = NULL;
    return 1;
}

int pic_generate_hooked(const struct pic_conn *c, json_t *req, struct pic_stream *s, bool (*give_up)(void *arg),
                        void *arg, uint64_t *ticket_out)
{
    json_t *msg = json_deep_copy(req), *reply = NULL;
    if (!msg || json_object_set_new(msg, "cmd", json_string("generate"))) {
        json_decref(msg);
        return pi_fail(PI_E_NOMEM, "cannot build the request");
    }
    int rc = inst_request(c->name, msg, INST_REQ_TIMEOUT_MS, &reply);
    json_decref(msg);
    if (rc)
        return rc;
    if (!json_is_true(json_object_get(reply, "ok"))) {
        const char *e = json_string_value(json_object_get(reply, "error"));
        rc = e && !strncmp(e, PIC_BUSY_PREFIX, strlen(PIC_BUSY_PREFIX)) ? pi_fail(EBUSY, "%s", e)
                                                                           : pi_fail(PI_E_INVAL, "%s", e ? e : "refused");
        json_decref(reply);
        return rc;
    }
    /* every request slot is taken: the request waits in the supervisor's queue; ask for its slot */
    const json_int_t ticket = json_integer_value(json_object_get(reply, "ticket"));
    if (ticket > 0 && !json_object_get(reply, "slot")) {
        json_decref(reply);
        reply = NULL;
        for (;;) {
            if (give_up && give_up(arg)) {
                if (ticket_out)
                    *ticket_out = (uint64_t)ticket;
                return pi_fail(ECANCELED, "gave up waiting for a slot (ticket %lld)", (long long)ticket);
            }
            const struct timespec ts = { 0, PIC_TICKET_POLL_MS * 1000000L };
            nanosleep(&ts, NULL);
            if ((rc = poll_ticket(c, (uint64_t)ticket, &reply)) <= 0)
                break;
        }
        if (rc)
            return rc;
    }
    return stream_from_reply(c, reply, s);
}

int pic_generate(const struct pic_conn *c, json_t *req, struct pic_stream *s)
{
    return pic_generate_hooked(c, req, s, NULL, NULL, NULL);
}

int pic_abandon_ticket(const struct pic_conn *c, uint64_t ticket, int timeout_ms)
{
    const uint64_t deadline = inst_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    json_t *reply = NULL;
    int rc;
    while ((rc = poll_ticket(c, ticket, &reply)) == 1) {
        if (inst_now_ns() >= deadline)
            return pi_fail(ETIMEDOUT, "ticket %llu got no slot within %d ms", (unsigned long long)ticket, timeout_ms);
        const struct timespec ts = { 0, PIC_TICKET_POLL_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
    struct pic_stream s;
    if (rc || (rc = stream_from_reply(c, reply, &s)))
        return rc;
    return pic_abandon(&s, timeout_ms);
}

int pic_wait(const struct pic_stream *s, uint32_t *n, int wait_ms)
{
    const struct pi_request *r = s->r;
    const uint32_t cap = (uint32_t)(PI_REQ_MAX_TOKENS - s->n_prompt);
    const pid_t sup = (pid_t)s->c->ctl->supervisor_pid;
    const uint64_t deadline = inst_now_ns() + (uint64_t)(wait_ms > 0 ? wait_ms : 0) * 1000000ull;
    for (;;) {
        /* acquire on state first: once DONE/FAILED is seen, the n_gen loaded after it is final
         * (gpud stores n_gen before it stores DONE, both with release) */
        const unsigned st = atomic_load_explicit(&r->state, memory_order_acquire);
        uint32_t got = atomic_load_explicit(&r->n_gen, memory_order_acquire);
        if (r->id != s->id)
            return pi_fail(PI_E_IO, "request %llu: its slot %d was taken over (released by someone else?)",
                           (unsigned long long)s->id, s->slot);
        if (got > cap)
            got = cap;
        if (st == PI_REQ_FAILED)
            return pi_fail(PI_E_IO, "request %llu failed: %.*s", (unsigned long long)s->id, PI_MSG_MAX, r->errmsg);
        if (st == PI_REQ_DONE) {
            *n = got;
            return PIC_DONE;
        }
        if (got > *n) {
            *n = got;
            return PIC_RUNNING;
        }
        const uint64_t now = inst_now_ns();
        if (now >= deadline)
            return PIC_RUNNING;
        uint64_t left_ms = (deadline - now) / 1000000ull + 1;
        int w = pi_futex_wait((_Atomic uint32_t *)&r->n_gen, got,
                              left_ms < PIC_WAIT_SLICE_MS ? (int)left_ms : PIC_WAIT_SLICE_MS);
        if (w == -EINTR)
            return pi_fail(EINTR, "interrupted");
        if (w == -ETIMEDOUT && !inst_pid_alive(sup))
            return pi_fail(PI_E_IO, "instance '%s' died (supervisor pid %d is gone)", s->c->name, (int)sup);
    }
}

int32_t pic_token(const struct pic_stream *s, uint32_t i) { return s->r->tokens[s->n_prompt + (int32_t)i]; }

/* Written by gpud before its release store of n_gen > i, which pic_wait acquired. */
const struct pi_logprob *pic_logprob(const struct pic_stream *s, uint32_t i)
{
    return i < PI_LP_MAX_TOKENS ? &s->c->ctl->logprobs[s->slot][i] : NULL;
}

static int slot_command(const struct pic_stream *s, const char *cmd)
{
    json_t *req = json_pack("{s:s, s:i, s:I}", "cmd", cmd, "slot", s->slot, "id", (json_int_t)s->id);
    if (!req)
        return pi_fail(PI_E_NOMEM, "cannot build the %s command", cmd);
    json_t *reply = NULL;
    int rc = inst_request(s->c->name, req, INST_REQ_TIMEOUT_MS, &reply);
    json_decref(req);
    if (rc)
        return rc;
    if (!json_is_true(json_object_get(reply, "ok"))) {
        const char *e = json_string_value(json_object_get(reply, "error"));
        rc = e && !strncmp(e, "unknown command", 15) ? pi_fail(PI_E_UNSUPPORTED, "the supervisor has no '%s'", cmd)
                                                      : pi_fail(PI_E_INVAL, "%s", e ? e : "refused");
    }
    json_decref(reply);
    return rc;
}

int pic_release(const struct pic_stream *s) { return slot_command(s, "release"); }

int pic_cancel(const struct pic_stream *s) { return slot_command(s, "cancel"); }

int pic_abandon(const struct pic_stream *s, int timeout_ms)
{
    (void)pic_cancel(s); /* best effort: without it the request runs to its n_predict */
    const uint64_t deadline = inst_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    uint32_t n = 0;
    for (;;) {
        if (s->r->id != s->id || atomic_load_explicit(&s->r->state, memory_order_acquire) == PI_REQ_FREE)
            return 0; /* freed already (a cancel that also frees, or the supervisor's sweep) */
        int rc = pic_wait(s, &n, PIC_WAIT_SLICE_MS);
        if (rc == PIC_DONE || (rc < 0 && s->r->id == s->id &&
                               atomic_load_explicit(&s->r->state, memory_order_acquire) == PI_REQ_FAILED))
            return pic_release(s);
        if (rc < 0)
            return rc;
        if (inst_now_ns() >= deadline)
            return pi_fail(ETIMEDOUT, "request %llu did not end within %d ms", (unsigned long long)s->id, timeout_ms);
    }
}
