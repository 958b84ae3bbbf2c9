/* cudev_trace.h — the kernels' timeline ring of a device context (gpud/cuda/cuk_trace.cuh; a
 * -Dcuk_trace=true build, else both calls do nothing but note an ignored PINFER_CUDA_TRACE).
 *
 * PINFER_CUDA_TRACE=FILE: every marked kernel's blocks append a record to a ring of
 * PINFER_CUDA_TRACE_CAP records (default 1 << 20, 48 bytes each) in device memory, written to FILE when
 * the context closes (cuk_trace.h: the format; bench/gpu/trace_chain.py reads it). "%p" in FILE is the
 * pid; a process's later contexts write FILE.1, FILE.2, ...; one context at a time is traced (the
 * kernels' pointers are per process). The ring and its counter are plain cudaMallocs made after the
 * context's arenas: outside the VRAM plan's bytes (the budget does not count them; the device's used
 * bytes that cudev_mem reports do). The runtime is called directly, not through cudev's checked
 * calls: their count (PINFER_CUDA_FAIL_CALL) is that of a normal build. */
#ifndef PI_CUDEV_TRACE_H
#define PI_CUDEV_TRACE_H

/* at the end of cudev_open (owner: the context) */
void cudev_trace_open(const void *owner);
/* in cudev_close, the stream synchronized: the ring to the file, then freed (another owner: nothing) */
void cudev_trace_close(const void *owner);

#endif
