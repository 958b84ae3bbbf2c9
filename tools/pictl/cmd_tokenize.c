/* pictl tokenize — print the token ids of a text, space-separated (BOS included when the model adds
 * one), as llama.cpp's tokenizer tools do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "pi_err.h"
#include "pictl.h"
#include "run_opts.h"
#include "tokenizer.h"

int cmd_tokenize(int argc, char **argv)
{
    struct run_opts o;
    int rc = run_opts_parse(&o, argc, argv, RUN_OPTS_TOKENIZE);
    if (rc)
        return rc > 0 ? 0 : 2;
    struct pi_model *m = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int exit_code = 1;
    if ((rc = model_load(&m, o.model))) {
        pictl_error("tokenize", o.model, rc);
        goto out;
    }
    if ((rc = tok_encode(m->tok, o.prompt, strlen(o.prompt), tok_add_bos(m->tok), true, &ids, &n))) {
        pictl_error("tokenize", "encode", rc);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    exit_code = 0;
out:
    free(ids);
    model_free(m);
    run_opts_fini(&o);
    return exit_code;
}
