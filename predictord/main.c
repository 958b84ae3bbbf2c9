/* predictord — the predictor stage (see predictord.h). main only builds the context and runs the loop. */
#include <stdio.h>

#include "pi_err.h"
#include "predictord.h"

int main(int argc, char **argv)
{
    struct predictord p;
    int rc = predictord_init(&p, argc, argv);
    if (!rc)
        rc = predictord_run(&p);
    if (rc) {
        if (p.rt.me)
            stage_fail(&p.rt, rc, "predictord");
        else
            fprintf(stderr, "predictord: %s: %s\n", pi_strerror(rc), pi_errmsg());
    }
    predictord_fini(&p);
    return rc ? 1 : 0;
}
