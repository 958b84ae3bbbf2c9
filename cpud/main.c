/* cpud — the CPU worker stage (see cpud.h). main only builds the context and runs the loop. */
#include <stdio.h>

#include "cpud.h"
#include "pi_err.h"

int main(int argc, char **argv)
{
    struct cpud c;
    const int rc_init = cpud_init(&c, argc, argv);
    const int rc = rc_init ? rc_init : cpud_run(&c);
    if (rc) { /* "start" or "serve", as gpud: the stage's name is already the message's subject */
        if (c.rt.me)
            stage_fail(&c.rt, rc, rc_init ? "start" : "serve");
        else
            fprintf(stderr, "cpud: %s: %s\n", pi_strerror(rc), pi_errmsg());
    }
    cpud_fini(&c);
    return rc_init ? stage_start_exit_status(rc_init) : rc ? 1 : 0;
}
