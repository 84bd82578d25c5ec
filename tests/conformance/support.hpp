// Helpers shared by the conformance tests. Everything here uses only the public API, so the suite
// stays backend-neutral; the host-backend controls are touched only by HostControlsGuard, which
// tests tagged [host-only] use.
#pragma once

#include <catch2/catch.hpp>

#include <devmem/devmem.hpp>
#include <devmem/host_backend.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace conformance {

using devmem::DType;
using devmem::Order;
using devmem::Shape;
using devmem::Slice;
using devmem::Strides;
using std::int64_t;

inline constexpr int64_t kKiB = int64_t{1} << 10;
inline constexpr int64_t kMiB = int64_t{1} << 20;

/// Matches an exception whose what() contains `needle` (Catch2 v2's Contains only matches strings).
class MessageContainsMatcher : public Catch::MatcherBase<std::exception> {
 public:
  explicit MessageContainsMatcher(std::string needle) : needle_(std::move(needle)) {}
  bool match(const std::exception& e) const override {
    return std::string(e.what()).find(needle_) != std::string::npos;
  }
  std::string describe() const override { return "message contains \"" + needle_ + "\""; }

 private:
  std::string needle_;
};
inline MessageContainsMatcher MessageContains(std::string needle) {
  return MessageContainsMatcher(std::move(needle));
}

/// Matches an exception whose what() starts with `prefix`.
class MessageStartsWithMatcher : public Catch::MatcherBase<std::exception> {
 public:
  explicit MessageStartsWithMatcher(std::string prefix) : prefix_(std::move(prefix)) {}
  bool match(const std::exception& e) const override {
    return std::string(e.what()).rfind(prefix_, 0) == 0;
  }
  std::string describe() const override { return "message starts with \"" + prefix_ + "\""; }

 private:
  std::string prefix_;
};
inline MessageStartsWithMatcher MessageStartsWith(std::string prefix) {
  return MessageStartsWithMatcher(std::move(prefix));
}

/// True when the suite runs against the host backend (the simulated device).
inline bool on_host_backend() {
  return devmem::backend_name() == "host";
}

inline DType f8() {
  return devmem::dtype_of<double>();
}
inline DType f4() {
  return devmem::dtype_of<float>();
}
inline DType i8() {
  return devmem::dtype_of<std::int64_t>();
}
inline DType i4() {
  return devmem::dtype_of<std::int32_t>();
}
inline DType u1() {
  return devmem::dtype_of<std::uint8_t>();
}

/// Restores the host backend's memory capacity and cancels pending fault injections when the
/// scope ends (also when a REQUIRE fails). Only for [host-only] tests.
class HostControlsGuard {
 public:
  HostControlsGuard() : capacity_(devmem::host::device_memory_capacity()) {
    devmem::host::clear_failures();
    // Finish earlier tests' asynchronous work and release what it kept alive, so that the memory
    // in use does not change under the test's feet.
    devmem::current_context()->synchronize();
  }
  HostControlsGuard(const HostControlsGuard&) = delete;
  HostControlsGuard& operator=(const HostControlsGuard&) = delete;
  ~HostControlsGuard() {
    devmem::host::clear_failures();
    try {
      devmem::host::set_device_memory_capacity(capacity_);
    } catch (...) {  // a destructor must not throw; the capacity was valid when read
    }
  }

 private:
  int64_t capacity_;
};

/// Number of elements of a shape (1 for a 0-d shape).
inline int64_t count_of(const Shape& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

/// start, start + 1, ..., start + n - 1.
template <class T = double>
std::vector<T> iota_vec(int64_t n, T start = T{0}) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(start + static_cast<T>(i));
  return v;
}

/// A new pageable host array of `shape` in `order` whose element at C-order position k is k.
template <class T = double>
devmem::HostArray iota_host(const Shape& shape, Order order = Order::C, T start = T{0}) {
  devmem::HostArray h(shape, devmem::dtype_of<T>(), order);
  std::vector<T> values = iota_vec<T>(count_of(shape), start);
  h.copy_from(devmem::HostArray::view(std::span<T>(values), shape));
  return h;
}

/// A new device array of `shape` in `order` whose element at C-order position k is k.
template <class T = double>
devmem::DeviceArray iota_device(const Shape& shape, Order order = Order::C,
                                const devmem::Stream& stream = {}, T start = T{0}) {
  devmem::DeviceArray d = devmem::device_array<T>(shape, order, stream);
  std::vector<T> values = iota_vec<T>(count_of(shape), start);
  d.copy_to_device(devmem::HostArray::view(std::span<T>(values), shape), stream);
  if (stream.is_specified()) stream.synchronize();
  return d;
}

/// A pageable host array in memory of its own pages (64 KiB aligned and rounded), zero-filled.
/// Registration works on whole pages on GPU backends, so arrays that are pinned, mapped or
/// registered separately in one test must not share a page.
inline devmem::HostArray page_aligned_host(const Shape& shape, const DType& dtype,
                                           Order order = Order::C) {
  constexpr std::size_t kAlign = 64 * 1024;
  const auto bytes =
      static_cast<std::size_t>(std::max<int64_t>(count_of(shape) * dtype.itemsize(), 1));
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* const p = std::aligned_alloc(kAlign, rounded);
  REQUIRE(p != nullptr);
  std::memset(p, 0, rounded);
  const std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });  // NOLINT(*-no-malloc)
  return devmem::HostArray::view(
      p, shape, dtype, devmem::layout::dense_strides(shape, dtype.itemsize(), order), owner);
}

/// page_aligned_host holding 0, 1, 2, ... in C order.
inline devmem::HostArray page_aligned_iota(const Shape& shape, Order order = Order::C) {
  devmem::HostArray h = page_aligned_host(shape, f8(), order);
  h.copy_from(iota_host(shape));
  return h;
}

/// Calls fn(index) for every index of `shape` in C order.
template <class Fn>
void for_each_index(const Shape& shape, Fn&& fn) {
  std::vector<int64_t> idx(shape.size(), 0);
  if (count_of(shape) == 0) return;
  for (;;) {
    fn(std::span<const int64_t>(idx));
    int k = static_cast<int>(shape.size()) - 1;
    for (; k >= 0; --k) {
      const auto kk = static_cast<std::size_t>(k);
      if (++idx[kk] < shape[kk]) break;
      idx[kk] = 0;
    }
    if (k < 0) return;
  }
}

/// The values a view with `shape`, byte `strides` and byte `offset` (of element 0 from the buffer
/// start) sees in a buffer whose element i holds i (itemsize `itemsize`), in C order. Computed
/// independently of devmem's layout code, from the strides the test itself expects.
inline std::vector<double> gather_iota(const Shape& shape, const Strides& strides, int64_t offset,
                                       int64_t itemsize = 8) {
  std::vector<double> out;
  for_each_index(shape, [&](std::span<const int64_t> idx) {
    int64_t byte = offset;
    for (std::size_t k = 0; k < idx.size(); ++k) byte += idx[k] * strides[k];
    out.push_back(static_cast<double>(byte / itemsize));
  });
  return out;
}

/// Elements of a host array in C order.
template <class T = double>
std::vector<T> host_values(const devmem::HostArray& h) {
  return h.to_vector<T>();
}

/// Elements of a device array in C order (copied through the default stream of the array).
template <class T = double>
std::vector<T> device_values(const devmem::DeviceArray& d) {
  return d.to_vector<T>();
}

}  // namespace conformance
