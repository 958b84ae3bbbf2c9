/* client.h — the client side of one generation on a running instance, shared by `pictl generate`
 * (and `pictl run`, `pictl chat`) and apid.
 *
 * A request goes to the supervisor as {"cmd":"generate",...} over the control socket (fields in
 * supervisor.h); the reply names the request's id and slot. Its tokens come back through that slot
 * of the ctl segment (attached read-only): gpud writes tokens[n_prompt + i], then stores n_gen with
 * release and wakes the n_gen futex; pic_wait loads n_gen with acquire. Whatever stage restarts
 * meanwhile, the slot keeps the tokens, so the stream just continues. When the client is done it
 * releases the slot; one that stops early (a stop string, a disconnected HTTP client) cancels it
 * first where the supervisor knows "cancel", else waits for the end and then releases.
 *
 * Thread-safety: a pic_conn may be shared by threads (it is read-only after pic_open); each
 * pic_stream belongs to one thread. */
#ifndef PI_SUPERVISOR_CLIENT_H
#define PI_SUPERVISOR_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "pipeline_layout.h"
#include "shm.h"

struct pic_conn {
    char name[PI_INSTANCE_MAX];
    struct shm_seg seg;
    const struct pi_ctl *ctl;
};

struct pic_stream {
    const struct pic_conn *c;
    const struct pi_request *r;
    int slot;
    uint64_t id;
    int32_t n_prompt;
};

enum pic_status {
    PIC_RUNNING = 0, /* more tokens may come */
    PIC_DONE = 1,    /* the request ended: the count pic_wait returned is final */
};

/* Attach the instance's ctl segment (read-only). -ENOENT with a message if it is not running. */
int pic_open(struct pic_conn *c, const char *name);
void pic_close(struct pic_conn *c);

/* Send a generate command (req: its fields without "cmd"; borrowed) and fill *s. A refusal by the
 * supervisor is -PI_E_INVAL with its message; a full table of slots is -EBUSY (retry later). */
int pic_generate(const struct pic_conn *c, json_t *req, struct pic_stream *s);

/* pic_generate, and while the request waits in the supervisor's queue for a slot, give_up(arg) is
 * asked between polls: true → -ECANCELED with the request's ticket in *ticket_out (it stays queued:
 * hand it to pic_abandon_ticket, or its slot would be held by nobody). */
int pic_generate_hooked(const struct pic_conn *c, json_t *req, struct pic_stream *s, bool (*give_up)(void *arg),
                        void *arg, uint64_t *ticket_out);
/* Wait for a given-up ticket's slot, then pic_abandon it. */
int pic_abandon_ticket(const struct pic_conn *c, uint64_t ticket, int timeout_ms);

/* Wait at most wait_ms (0: do not sleep) for tokens beyond *n or the end of the request. *n gets
 * the number of tokens published. Returns PIC_RUNNING, PIC_DONE, or a negative code with a message:
 * the request FAILED (its message), its slot was taken over, the supervisor is gone. */
int pic_wait(const struct pic_stream *s, uint32_t *n, int wait_ms);

/* Generated token i (i < the count pic_wait returned). */
int32_t pic_token(const struct pic_stream *s, uint32_t i);

/* The log-probabilities of generated token i (i < the count pic_wait returned) of a request sent
 * with "logprobs"; NULL beyond the PI_LP_MAX_TOKENS the table holds. Read it before releasing. */
const struct pi_logprob *pic_logprob(const struct pic_stream *s, uint32_t i);

/* Free the slot of a DONE/FAILED request. */
int pic_release(const struct pic_stream *s);

/* Stop a request early: {"cmd":"cancel"} when the supervisor has it (-PI_E_UNSUPPORTED when it
 * does not: the request then runs to its end). Does not release. */
int pic_cancel(const struct pic_stream *s);

/* Give a request up without streaming it further: cancel it if possible, wait (at most
 * timeout_ms) for it to end, release it. 0 when released. */
int pic_abandon(const struct pic_stream *s, int timeout_ms);

#endif
