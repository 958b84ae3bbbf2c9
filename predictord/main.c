/* predictord — the predictor stage (see predictord.h). main only builds the context and runs the loop. */
#include <stdio.h>

#include "pi_err.h"
#include "predictord.h"

int main(int argc, char **argv)
{
    struct predictord p;
    const int rc_init = predictord_init(&p, argc, argv);
    const int rc = rc_init ? rc_init : predictord_run(&p);
    if (rc) { /* "start" or "serve", as gpud: the stage's name is already the message's subject */
        if (p.rt.me)
            stage_fail(&p.rt, rc, rc_init ? "start" : "serve");
        else
            fprintf(stderr, "predictord: %s: %s\n", pi_strerror(rc), pi_errmsg());
    }
    predictord_fini(&p);
    return rc_init ? stage_start_exit_status(rc_init) : rc ? 1 : 0;
}
