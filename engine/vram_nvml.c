/* vram_nvml.c — NVML's memory figures through dlopen (see vram_nvml.h). The three entry points
 * and the memory struct are NVML's stable C ABI (nvml.h: nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2,
 * nvmlDeviceGetMemoryInfo with nvmlMemory_t {total, free, used}, unsigned long long each). */
#include "vram_nvml.h"

#include <dlfcn.h>
#include <stddef.h>

#include "pi_err.h"

struct nvml_memory {
    unsigned long long total, free, used;
};

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned int, void **);
typedef int (*nvml_mem_fn)(void *, struct nvml_memory *);
typedef int (*nvml_shutdown_fn)(void);

int vram_nvml_mem(int index, uint64_t *free_bytes, uint64_t *total_bytes)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return pi_fail(PI_E_UNSUPPORTED, "nvml: %s", dlerror());
    nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    nvml_handle_fn handle = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml_mem_fn mem = (nvml_mem_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
    nvml_shutdown_fn fini = (nvml_shutdown_fn)dlsym(lib, "nvmlShutdown");
    int rc = 0;
    void *dev = NULL;
    struct nvml_memory m = { 0 };
    int e;
    if (!init || !handle || !mem || !fini)
        rc = pi_fail(PI_E_UNSUPPORTED, "nvml: missing entry points");
    else if ((e = init()) != 0)
        rc = pi_fail(PI_E_UNSUPPORTED, "nvml: nvmlInit failed (%d)", e);
    else {
        if ((e = handle((unsigned int)index, &dev)) != 0 || (e = mem(dev, &m)) != 0)
            rc = pi_fail(PI_E_UNSUPPORTED, "nvml: GPU %d: error %d", index, e);
        fini();
    }
    dlclose(lib);
    if (!rc) {
        *free_bytes = m.free;
        *total_bytes = m.total;
    }
    return rc;
}
