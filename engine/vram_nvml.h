/* vram_nvml.h — a GPU's free and total memory without a CUDA context: NVML (libnvidia-ml.so.1,
 * loaded with dlopen, so that nothing links against it and a machine without the driver just
 * answers "unsupported"). The supervisor sizes the default VRAM budget with it before gpud opens
 * the device. */
#ifndef PI_VRAM_NVML_H
#define PI_VRAM_NVML_H

#include <stdint.h>

/* Free and total bytes of GPU `index`. 0, or -PI_E_UNSUPPORTED with a message (no driver/GPU). */
int vram_nvml_mem(int index, uint64_t *free_bytes, uint64_t *total_bytes);

#endif
