/* fuzz_gpuidx — any bytes as PowerInfer's GPU neuron index (MODEL.generated.gpuidx, engine/gpuidx.h),
 * read against a model shape taken from the input, as `--vram-budget` reads an index found next to
 * a downloaded model.
 *
 * Input: n_layer (1 byte, 1..8) and n_ff (2 bytes little-endian, 1..4096), then the file.
 * Oracles: a refusal names its reason; an accepted index holds only 0 and 1, and written back
 * (gpuidx_write) and read again it gives the same split and capacity. */
#include "fuzz_util.h"
#include "gpuidx.h"
#include "pi_err.h"

#define MAX_LAYERS 8
#define MAX_FF 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    const int32_t n_layer = 1 + data[0] % MAX_LAYERS;
    const int64_t n_ff = 1 + (int64_t)((data[1] | (unsigned)data[2] << 8) % MAX_FF);
    char path[512], again[512];
    fuzz_put_file("in.gpuidx", data + 3, size - 3, path, sizeof path);
    uint8_t *idx = malloc((size_t)n_layer * (size_t)n_ff), *idx2 = malloc((size_t)n_layer * (size_t)n_ff);
    FUZZ_CHECK(idx && idx2);
    uint64_t cap = 0, cap2 = 0;
    pi_errmsg_clear();
    if (gpuidx_read(path, n_layer, n_ff, idx, &cap) == 0) {
        for (int64_t i = 0; i < (int64_t)n_layer * n_ff; i++)
            FUZZ_CHECK(idx[i] == 0 || idx[i] == 1);
        snprintf(again, sizeof again, "%s/again.gpuidx", fuzz_scratch_dir());
        FUZZ_CHECK(gpuidx_write(again, n_layer, n_ff, idx, cap) == 0);
        FUZZ_CHECK(gpuidx_read(again, n_layer, n_ff, idx2, &cap2) == 0);
        FUZZ_CHECK(cap2 == cap && memcmp(idx, idx2, (size_t)n_layer * (size_t)n_ff) == 0);
        unlink(again);
    } else {
        FUZZ_CHECK(pi_errmsg()[0] != '\0');
    }
    free(idx);
    free(idx2);
    fuzz_put_file("in.gpuidx", NULL, 0, path, sizeof path);
    return 0;
}
