/* AMX tile state for the tile kernels (kernels/gemm_i8_amx.c,
 * kernels/gemm_bf16_amx.c). Linux lets a process execute tile instructions
 * only after it asks for the tile data state (arch_prctl
 * ARCH_REQ_XCOMP_PERM, the kernel's Documentation/arch/x86/xstate.rst);
 * without that the first tile load kills the process with SIGILL. */
#ifndef DSQ_KERNELS_AMX_H
#define DSQ_KERNELS_AMX_H

#include <stdbool.h>

/* Asks once per process; true when the tile kernels may run. It does not
 * check the CPU: callers ask dsq_cpu_has(DSQ_CPU_AMX_*) first. */
bool dsq_amx_ready(void);
/* Loads the tile configuration on the calling thread: palette 1, all eight
 * tiles 16 rows x 64 bytes (the one shape the tile kernels use). Only after
 * dsq_amx_ready() said yes. */
void dsq_amx_configure(void);

#endif
