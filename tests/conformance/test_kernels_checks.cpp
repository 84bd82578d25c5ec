// What the host simulator catches that a GPU would not report, added with issue 34 (its
// reproducers d2, d4 and d5): writes past the dynamic shared memory, views that reach a kernel
// without passing through launch (inside a struct argument that does not list them), and host code
// indexing device memory through a view; and the bounds of what kernels round 2 added: rows of
// shared arrays and views, atomics on shared arrays, views of dynamic shared memory and 2-d
// constant arrays. [host-only], in conformance_host only (a GPU faults or
// corrupts memory instead): a file of its own because test_kernels_simulator.cpp is near the size
// limit.
#include "support.hpp"

#include <devmem/host_controls.hpp>
#include <devmem/kernel.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace conformance;
using devmem::ArrayView;
using devmem::DeviceArray;

namespace {

/// 32 threads; thread 0 writes dynamic shared elements [from, to) of 32 floats given, then every
/// thread copies the static shared array, which the writes must not reach, to `out`.
DEVMEM_KERNEL void dynamic_shared_writes(ArrayView<float, 1> out, int from, int to) {
  float* dyn = devmem::dynamic_shared<float>();
  DEVMEM_SHARED_ARRAY(st, float, 32);
  const unsigned t = devmem::thread_idx().x;
  st[t] = 5.0f;
  devmem::syncthreads();
  if (t == 0) {
    for (int i = from; i < to; ++i) dyn[i] = -1.0f;
  }
  devmem::syncthreads();
  out[t] = st[t];
}

/// Writes past the dynamic shared memory and returns without another barrier.
DEVMEM_KERNEL void dynamic_shared_overrun_at_end(ArrayView<float, 1> out) {
  float* dyn = devmem::dynamic_shared<float>();
  const unsigned t = devmem::thread_idx().x;
  dyn[t + 4] = 1.0f;  // past the 4 floats of dynamic shared memory the launch gives
  out[t] = 0.0f;
}

struct UnlistedParams {
  ArrayView<float, 1> x;
  float v = 0.0f;
};

DEVMEM_KERNEL void fill_unlisted(UnlistedParams p) {
  const std::int64_t i = devmem::global_id();
  if (i < p.x.shape(0)) p.x[i] = p.v;
}

DEVMEM_CONSTANT_ARRAY(checked_lut_2d, float, 3, 5);

/// One thread; `what` picks the out-of-bounds access (the indices come as arguments, so that the
/// compiler cannot see them).
DEVMEM_KERNEL void round_two_bounds(ArrayView<float, 2> m, int what, int i, int j) {
  DEVMEM_SHARED_ARRAY(tile, int, 4, 8);
  if (what == 0) tile.row(i)[static_cast<std::size_t>(j)] = 1;
  if (what == 1) devmem::atomic_add(tile, {i, j}, 1);
  if (what == 2) devmem::atomic_add(tile.row(i), j, 1);
  if (what == 3) m.row(i)[j] = 1.0f;
  if (what == 4) devmem::atomic_add(devmem::dynamic_shared_array<float>(8), i, 1.0f);
  if (what == 5) m(0, 0) = devmem::dynamic_shared_array<float>(i, j)(0, 0);
  if (what == 6) m(0, 0) = checked_lut_2d[i][j];
}

void check_launch_failure(const devmem::BackendError& e, const std::string& text) {
  CHECK(e.code_name() == "LaunchFailure");
  CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains(text));
}

}  // namespace

// d2: writing past dynamic_shared<float>() used to overwrite the block's static shared array.
TEST_CASE("kernels: the simulator reports writes outside the dynamic shared memory",
          "[kernels][host-only]") {
  const DeviceArray out = devmem::device_array<float>({32});
  devmem::launch({1, 32, 32 * sizeof(float)}, dynamic_shared_writes, out, 0, 32);  // inside
  CHECK(out.to_vector<float>() == std::vector<float>(32, 5.0f));
  try {
    devmem::launch<dynamic_shared_writes>({1, 32, 32 * sizeof(float)}, out, 32, 40);
    devmem::synchronize();  // reports the kernel's failure
    FAIL("launch did not report the overrun");
  } catch (const devmem::BackendError& e) {
    check_launch_failure(e,
                         "host launch: LaunchFailure (719): dynamic_shared_writes: dynamic_shared: "
                         "block (0, 0, 0) wrote 32 bytes past the end of its 128 bytes of dynamic "
                         "shared memory (bytes 128 to 159 of it, found at syncthreads() "
                         "(test_kernels_checks.cpp:");
  }
  try {
    devmem::launch<dynamic_shared_writes>({1, 32, 32 * sizeof(float)}, out, -2, 0);
    devmem::synchronize();  // reports the kernel's failure
    FAIL("launch did not report the underrun");
  } catch (const devmem::BackendError& e) {
    check_launch_failure(e,
                         "wrote 8 bytes before the start of its 128 bytes of dynamic shared memory "
                         "(bytes -8 to -1 of it");
  }
  try {
    devmem::launch<dynamic_shared_overrun_at_end>({1, 8, 4 * sizeof(float)}, out);
    devmem::synchronize();  // reports the kernel's failure
    FAIL("launch did not report the overrun");
  } catch (const devmem::BackendError& e) {
    check_launch_failure(e,
                         "wrote 32 bytes past the end of its 16 bytes of dynamic shared memory "
                         "(bytes 16 to 47 of it, found when the block finished)");
  }
  // The simulator keeps working.
  devmem::launch({1, 32, 32 * sizeof(float)}, dynamic_shared_writes, out, 8, 16);
  CHECK(out.to_vector<float>() == std::vector<float>(32, 5.0f));
}

// d4: a view inside a struct that does not list it used to reach the kernel unchecked, and the
// kernel wrote freed memory.
TEST_CASE("kernels: the simulator refuses a view that reached a kernel without launch's checks",
          "[kernels][host-only]") {
  UnlistedParams p{};
  {
    const DeviceArray a = devmem::device_array<float>({256});
    p = UnlistedParams{a.view<float, 1>(), 3.0f};
  }
  devmem::current_context()->flush_deallocations();
  try {
    devmem::launch<fill_unlisted>({1, 256}, p);
    devmem::synchronize();  // reports the kernel's failure
    FAIL("the kernel indexed an unchecked view");
  } catch (const devmem::BackendError& e) {
    check_launch_failure(e, "fill_unlisted: ArrayView of shape (256,) at 0x");
    check_launch_failure(
        e,
        ": the view reached the kernel without passing through launch (a member of a struct "
        "argument, or read from memory), so launch neither checked that its array is alive nor "
        "kept it alive; pass it as a kernel parameter of its own, or list the struct's views with "
        "a member `auto devmem_views() const { return std::tie(view, ...); }` in thread (0, 0, "
        "0) of block (0, 0, 0)");
  }
  // A view over a pointer the application manages is not devmem's to judge: it runs.
  const DeviceArray a = devmem::device_array<float>({4});
  const std::int64_t shape[] = {4};
  const std::int64_t strides[] = {4};
  devmem::launch(
      {1, 4}, fill_unlisted,
      UnlistedParams{ArrayView<float, 1>(static_cast<float*>(a.data()), shape, strides), 2.0f});
  CHECK(a.to_vector<float>() == std::vector<float>(4, 2.0f));
}

// d5: host code indexing device memory through a view worked in the simulator, and faults on a GPU.
TEST_CASE("kernels: host code may not index device memory through a view", "[kernels][host-only]") {
  const DeviceArray d = devmem::to_device(std::vector<float>{1, 2, 3});
  const ArrayView<float, 1> v = d.view<float, 1>();
  CHECK_THROWS_MATCHES(v[0] = 42.0f, devmem::InvalidArgument,
                       MessageStartsWith("ArrayView of shape (3,) at 0x"));
  CHECK_THROWS_MATCHES(
      (void)v(1), devmem::InvalidArgument,
      MessageContains(": host code indexes device memory outside a kernel, which faults on a GPU; "
                      "copy the elements instead (to_vector, item, set_item, copy_to_host), or "
                      "use mapped memory (mapped_array), which host code and kernels both index"));
  CHECK(d.to_vector<float>() == std::vector<float>{1, 2, 3});
  // Mapped host memory stays host-accessible, through its device view too.
  const devmem::MappedArray m = devmem::mapped_array<float>({3});
  const ArrayView<float, 1> mv = m.device().view<float, 1>();
  mv[2] = 7.0f;
  CHECK(static_cast<const float*>(m.data())[2] == 7.0f);
  // With the simulator's checks off the access goes ahead, as GPU code compiled unchecked would.
  const bool checking = devmem::host::bounds_checking();
  devmem::host::set_bounds_checking(false);
  v[0] = 42.0f;
  devmem::host::set_bounds_checking(checking);
  CHECK(d.item<float>(0) == 42.0f);
}

TEST_CASE(
    "kernels: the simulator checks rows, shared atomics, dynamic shared views and 2-d "
    "constants",
    "[kernels][host-only]") {
  const DeviceArray m = devmem::device_array<float>({3, 4});
  const auto fails_with = [&](int what, int i, int j, const std::string& text) {
    INFO("case " << what);
    try {
      devmem::launch<round_two_bounds>({1, 1, 8 * sizeof(float)}, m, what, i, j);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the index");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e, "round_two_bounds: " + text + " in thread (0, 0, 0) of block");
    }
  };
  fails_with(0, 4, 0, "shared_array row: index (4,) is out of bounds for shape (4,)");
  fails_with(0, 1, 8, "shared_array: index (8,) is out of bounds for shape (8,)");
  fails_with(1, 1, 8, "shared_array: index (1, 8) is out of bounds for shape (4, 8)");
  fails_with(1, -1, 0, "shared_array: index (-1, 0) is out of bounds for shape (4, 8)");
  fails_with(2, 0, 9, "shared_array: index (9,) is out of bounds for shape (8,)");
  fails_with(3, 3, 0, "ArrayView row: index (3,) is out of bounds for shape (3,)");
  fails_with(3, 2, 4, "ArrayView: index (4,) is out of bounds for shape (4,)");
  fails_with(4, 8, 0, "ArrayView: index (8,) is out of bounds for shape (8,)");
  fails_with(5, 4, 3,
             "dynamic_shared_array: the shape needs 48 bytes, more than the 32 bytes of dynamic "
             "shared memory the launch gives (LaunchConfig's shared_bytes),");
  fails_with(6, 2, 5, "constant array: index (2, 5) is out of bounds for shape (3, 5)");
  fails_with(6, 3, 0, "constant array: index (3, 0) is out of bounds for shape (3, 5)");
  // In bounds, every case runs.
  for (int what = 0; what != 7; ++what) {
    devmem::launch<round_two_bounds>({1, 1, 8 * sizeof(float)}, m, what, 1, 2);
  }
}
