/* cpu_relax.h — the pause a spinning waiter takes between polls (x86 PAUSE, Arm YIELD): it hands the
 * core's issue slots to a sibling hyperthread and keeps the spin from flooding the memory pipeline
 * while the waiter waits for another core's store. Used by the rings, the act segment's device key
 * and the thread pool. */
#ifndef PI_CPU_RELAX_H
#define PI_CPU_RELAX_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

#endif
