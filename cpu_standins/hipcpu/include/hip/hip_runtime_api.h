// <hip/hip_runtime_api.h> for the roc-hipcpu and cuda-hipcpu presets: HIP-CPU's header, then what
// devmem's compatibility layer adds to it (devmem_hipcpu/hip_compat.hpp).
#pragma once
// A system header: #include_next is a GCC extension that -Wpedantic would reject here.
#pragma GCC system_header

// Default visibility, so that HIP-CPU's runtime state (inline statics) is one object per process,
// shared by libdevmem.so and the programs that launch kernels, although devmem compiles with
// hidden visibility.
#pragma GCC visibility push(default)
#include_next <hip/hip_runtime_api.h>
#pragma GCC visibility pop

#include <devmem_hipcpu/hip_compat.hpp>
