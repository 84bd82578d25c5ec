/* A C program that consumes devmem's DLPack tensors the way another library would: it sees only
 * <dlpack/dlpack.h> and the plain DLManagedTensor struct (no devmem header, no C++), reads shape,
 * strides, dtype and data, checks the values (memory of device type kDLCPU is directly readable;
 * on a GPU backend only the metadata is checked), and hands the tensor back through its deleter.
 * Exits 0 when everything matches, 1 on a mismatch, 77 (skipped) when devmem has no device. */
#include <dlpack/dlpack.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

static int failures = 0;

#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Element `index` (C order over the shape) of a tensor, as a double. Strides NULL = compact. */
static double element(const DLTensor* t, int64_t index) {
  int64_t offset = 0; /* in elements */
  int64_t stride = 1;
  int d;
  for (d = t->ndim - 1; d >= 0; --d) {
    const int64_t i = index % t->shape[d];
    index /= t->shape[d];
    offset += i * (t->strides != NULL ? t->strides[d] : stride);
    stride *= t->shape[d];
  }
  {
    const size_t itemsize = (size_t)t->dtype.bits / 8u;
    const char* base = (const char*)t->data + (size_t)t->byte_offset;
    const char* p = base + (ptrdiff_t)(offset * (int64_t)itemsize);
    if (t->dtype.code == kDLFloat && t->dtype.bits == 64) {
      double v;
      memcpy(&v, p, sizeof v);
      return v;
    }
    if (t->dtype.code == kDLFloat && t->dtype.bits == 32) {
      float v;
      memcpy(&v, p, sizeof v);
      return (double)v;
    }
    if (t->dtype.code == kDLInt && t->dtype.bits == 32) {
      int32_t v;
      memcpy(&v, p, sizeof v);
      return (double)v;
    }
    if (t->dtype.code == kDLInt && t->dtype.bits == 64) {
      int64_t v;
      memcpy(&v, p, sizeof v);
      return (double)v;
    }
    if (t->dtype.code == kDLUInt && t->dtype.bits == 8) {
      uint8_t v;
      memcpy(&v, p, sizeof v);
      return (double)v;
    }
  }
  fprintf(stderr, "unexpected dtype code %d bits %d\n", t->dtype.code, t->dtype.bits);
  ++failures;
  return -1.0;
}

static int64_t element_count(const DLTensor* t) {
  int64_t n = 1;
  int d;
  for (d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

struct expected {
  int which;
  const char* name;
  int ndim;
  int64_t shape[2];
  int64_t strides[2]; /* in elements */
  uint8_t code;
  uint8_t bits;
  int64_t count;
  double values[12]; /* C order */
};

static const struct expected cases[] = {
    {DEVMEM_SHIM_C_FLOAT64,
     "3x4 float64",
     2,
     {3, 4},
     {4, 1},
     kDLFloat,
     64,
     12,
     {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
    {DEVMEM_SHIM_TRANSPOSED_INT32,
     "transposed 4x6 int32",
     2,
     {6, 4},
     {1, 6},
     kDLInt,
     32,
     24,
     {0, 6, 12, 18, 1, 7, 13, 19, 2, 8, 14, 20}}, /* the first 12 of 24 */
    {DEVMEM_SHIM_REVERSED_FLOAT32,
     "[::-2] float32",
     1,
     {5, 0},
     {-2, 0},
     kDLFloat,
     32,
     5,
     {9, 7, 5, 3, 1}},
    {DEVMEM_SHIM_SCALAR_INT64, "0-d int64", 0, {0, 0}, {0, 0}, kDLInt, 64, 1, {42}},
    {DEVMEM_SHIM_BOOL,
     "bool (kDLUInt 8 in DLPack 0.6)",
     1,
     {4, 0},
     {1, 0},
     kDLUInt,
     8,
     4,
     {1, 0, 1, 1}},
};

static void consume(const struct expected* e, DLDeviceType device_type) {
  DLManagedTensor* m = devmem_shim_export(e->which);
  const DLTensor* t;
  int d;
  int64_t i;
  if (m == NULL) {
    fprintf(stderr, "%s: export failed: %s\n", e->name, devmem_shim_last_error());
    ++failures;
    return;
  }
  t = &m->dl_tensor;
  /* The devmem handles are gone: the tensor alone keeps the memory alive. */
  EXPECT(devmem_shim_alive(e->which) == 1);
  EXPECT(t->device.device_type == device_type);
  EXPECT(t->ndim == e->ndim);
  EXPECT(t->dtype.code == e->code);
  EXPECT(t->dtype.bits == e->bits);
  EXPECT(t->dtype.lanes == 1);
  EXPECT(t->byte_offset == 0);
  EXPECT(t->data != NULL);
  EXPECT(element_count(t) == e->count);
  for (d = 0; d < t->ndim && d < 2; ++d) {
    EXPECT(t->shape[d] == e->shape[d]);
    EXPECT(t->strides != NULL && t->strides[d] == e->strides[d]);
  }
  if (t->device.device_type == kDLCPU) {
    for (i = 0; i < e->count && i < 12; ++i) {
      const double v = element(t, i);
      if (v != e->values[i]) {
        fprintf(stderr, "%s: element %lld is %g, expected %g\n", e->name, (long long)i, v,
                e->values[i]);
        ++failures;
      }
    }
  } else {
    printf("%s: device memory (type %d): metadata checked, values not readable from C\n", e->name,
           (int)t->device.device_type);
  }
  EXPECT(m->deleter != NULL);
  if (m->deleter != NULL) m->deleter(m);
  EXPECT(devmem_shim_alive(e->which) == 0);
  printf("%s: %s\n", e->name, failures == 0 ? "ok" : "FAILED");
}

int main(void) {
  const char* backend = devmem_shim_backend();
  DLDeviceType device_type = kDLCPU;
  size_t k;
  if (devmem_shim_device_count() == 0) {
    printf("dlpack_consumer: skipped: backend '%s' has no device\n", backend);
    return 77;
  }
  if (strcmp(backend, "cuda") == 0) device_type = kDLCUDA;
  if (strcmp(backend, "roc") == 0) device_type = kDLROCM;
  for (k = 0; k < sizeof cases / sizeof cases[0]; ++k) consume(&cases[k], device_type);
  /* An unknown case fails cleanly with a message. */
  EXPECT(devmem_shim_export(99) == NULL);
  EXPECT(strstr(devmem_shim_last_error(), "unknown case 99") != NULL);
  printf("dlpack_consumer (%s backend): %s\n", backend, failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
