/* The C interface of the test shim that hands devmem arrays to consumer.c as DLPack tensors. It
 * lives in a test-only library (libdevmem_dlpack_shim), never in libdevmem. */
#ifndef DEVMEM_DLPACK_SHIM_H
#define DEVMEM_DLPACK_SHIM_H

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The arrays the shim exports (values are documented in shim.cpp). */
enum devmem_shim_case {
  DEVMEM_SHIM_C_FLOAT64 = 0,    /* 3x4 float64, C order, element (i, j) = 4 i + j */
  DEVMEM_SHIM_TRANSPOSED_INT32, /* the transpose of a 4x6 int32 array holding 0..23 */
  DEVMEM_SHIM_REVERSED_FLOAT32, /* [::-2] of a float32 array holding 0..9 */
  DEVMEM_SHIM_SCALAR_INT64,     /* a 0-d int64 holding 42 */
  DEVMEM_SHIM_BOOL,             /* 4 bools: true, false, true, true */
  DEVMEM_SHIM_CASE_COUNT
};

/* Number of devices of devmem's active backend (0: the consumer has nothing to test). */
int devmem_shim_device_count(void);
/* Name of devmem's active backend ("host", "cuda", "roc"). */
const char* devmem_shim_backend(void);
/* A new DLPack tensor viewing a devmem array, or NULL (see devmem_shim_last_error). The devmem
 * handles the shim used are gone when this returns: only the tensor keeps the memory alive. */
DLManagedTensor* devmem_shim_export(int which);
/* 1 while the devmem memory behind the last export of `which` is alive, else 0. */
int devmem_shim_alive(int which);
const char* devmem_shim_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* DEVMEM_DLPACK_SHIM_H */
