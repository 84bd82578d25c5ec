// The raw baseline of the GPU runtimes, written once over the vendor call tables the GPU backends
// use (backends/cuda/cuda_api.hpp, backends/roc/hip_api.hpp: names only, each call returning its
// status and its name). The measurement is what a hand-written program would do: one stream of its
// own, two timing events around a batch of cudaMemcpyAsync / hipMemcpyAsync calls, buffers
// allocated with the vendor's malloc / hostAlloc. Included only by raw_baseline_cuda.cpp and
// raw_baseline_roc.cpp.
#pragma once

#include "raw_baseline.hpp"

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <utility>

namespace devmem::app {

template <class Vendor>
class VendorBaseline final : public RawBaseline {
 public:
  using Stream = typename Vendor::Stream;
  using Event = typename Vendor::Event;

  VendorBaseline(std::string copy_call, std::string alloc_call)
      : copy_call_(std::move(copy_call)), alloc_call_(std::move(alloc_call)) {
    check(Vendor::streamCreate(&stream_), "creating a stream");
    check(Vendor::eventCreate(&start_), "creating an event");
    check(Vendor::eventCreate(&end_), "creating an event");
  }
  ~VendorBaseline() override {
    release();
    static_cast<void>(Vendor::eventDestroy(end_));
    static_cast<void>(Vendor::eventDestroy(start_));
    static_cast<void>(Vendor::streamDestroy(stream_));
  }

  [[nodiscard]] std::string copy_call() const override { return copy_call_; }
  [[nodiscard]] std::string alloc_call() const override { return alloc_call_; }

  void prepare(Direction direction, HostMemory memory, std::size_t max_bytes) override {
    device_a_.ensure(max_bytes);
    if (direction == Direction::DeviceToDevice) {
      device_b_.ensure(max_bytes);
    } else {
      host_[memory].ensure(max_bytes, memory);
    }
  }

  double time_copies(Direction direction, HostMemory memory, std::size_t bytes,
                     int count) override {
    void* dst = nullptr;
    const void* src = nullptr;
    switch (direction) {
      case Direction::HostToDevice:
        dst = device_a_.get(bytes);
        src = host_.at(memory).get(bytes);
        break;
      case Direction::DeviceToHost:
        dst = host_.at(memory).get(bytes);
        src = device_a_.get(bytes);
        break;
      case Direction::DeviceToDevice:
        dst = device_b_.get(bytes);
        src = device_a_.get(bytes);
        break;
    }
    check(Vendor::eventRecord(start_, stream_), "recording the start event");
    for (int i = 0; i < count; ++i) {
      check(Vendor::memcpyAsync(dst, src, bytes, kind_of(direction), stream_), "copying");
    }
    check(Vendor::eventRecord(end_, stream_), "recording the end event");
    check(Vendor::eventSynchronize(end_), "waiting for the end event");
    float ms = 0.0f;
    check(Vendor::eventElapsedTime(&ms, start_, end_), "reading the event timer");
    return static_cast<double>(ms) * 1e-3;
  }

  double time_alloc_free(std::size_t bytes, int count) override {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) {
      void* p = nullptr;
      check(Vendor::malloc(&p, bytes), "allocating");
      check(Vendor::free(p), "freeing");
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // The strided side is device memory: the plain version would be a kernel (see the interface).
  double time_strided_loop(const StridedLoop&, int) override { return -1.0; }

  double time_enqueue(std::size_t bytes, int count) override {
    prepare(Direction::HostToDevice, HostMemory::Pinned, bytes);
    void* dst = device_a_.get(bytes);
    const void* src = host_.at(HostMemory::Pinned).get(bytes);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) {
      check(Vendor::memcpyAsync(dst, src, bytes, Vendor::kHostToDevice, stream_), "copying");
    }
    const auto end = std::chrono::steady_clock::now();
    check(Vendor::streamSynchronize(stream_), "synchronizing");
    return std::chrono::duration<double>(end - start).count();
  }

  void release() override {
    host_.clear();
    device_a_ = {};
    device_b_ = {};
  }

 private:
  static typename Vendor::MemcpyKind kind_of(Direction direction) {
    switch (direction) {
      case Direction::HostToDevice:
        return Vendor::kHostToDevice;
      case Direction::DeviceToHost:
        return Vendor::kDeviceToHost;
      case Direction::DeviceToDevice:
        break;
    }
    return Vendor::kDeviceToDevice;
  }

  static void check(typename Vendor::S status, const char* what) {
    if (status.code == Vendor::kSuccess) return;
    throw devmem::Error(fmt::format("{} baseline: {} failed: {}: {}", Vendor::kBackend, what,
                                    status.function, Vendor::errorString(status.code)));
  }

  /// Device memory from the vendor's malloc, grown on demand and written once.
  struct DeviceBuffer {
    struct Free {
      void operator()(void* p) const noexcept { static_cast<void>(Vendor::free(p)); }
    };
    std::unique_ptr<void, Free> data;
    std::size_t bytes = 0;
    void ensure(std::size_t wanted) {
      if (bytes >= wanted) return;
      data.reset();
      bytes = 0;
      void* p = nullptr;
      check(Vendor::malloc(&p, wanted), "allocating device memory");
      data.reset(p);
      bytes = wanted;
      check(Vendor::memsetAsync(p, 1, wanted, Vendor::defaultStream()), "writing device memory");
      check(Vendor::streamSynchronize(Vendor::defaultStream()), "synchronizing");
    }
    [[nodiscard]] void* get(std::size_t wanted) const {
      if (bytes < wanted) throw devmem::Error("raw baseline: buffer not prepared for this size");
      return data.get();
    }
  };

  /// Host memory of one kind: pageable from the C heap, pinned or mapped from hostAlloc.
  struct HostBuffer {
    struct Free {
      bool page_locked = false;
      void operator()(void* p) const noexcept {
        if (page_locked) {
          static_cast<void>(Vendor::hostFree(p));
        } else {
          ::operator delete(p, std::align_val_t{4096});
        }
      }
    };
    std::unique_ptr<void, Free> data;
    std::size_t bytes = 0;
    void ensure(std::size_t wanted, HostMemory memory) {
      if (bytes >= wanted) return;
      data.reset();
      bytes = 0;
      if (memory == HostMemory::Pageable) {
        data = std::unique_ptr<void, Free>(::operator new(wanted, std::align_val_t{4096}),
                                           Free{false});
      } else {
        void* p = nullptr;
        check(Vendor::hostAlloc(&p, wanted,
                                memory == HostMemory::Mapped ? Vendor::kHostAllocMapped : 0u),
              "allocating page-locked host memory");
        data = std::unique_ptr<void, Free>(p, Free{true});
      }
      bytes = wanted;
      std::memset(data.get(), 1, wanted);
    }
    [[nodiscard]] void* get(std::size_t wanted) const {
      if (bytes < wanted) throw devmem::Error("raw baseline: buffer not prepared for this size");
      return data.get();
    }
  };

  std::string copy_call_;
  std::string alloc_call_;
  Stream stream_{};
  Event start_{};
  Event end_{};
  DeviceBuffer device_a_;
  DeviceBuffer device_b_;
  std::map<HostMemory, HostBuffer> host_;
};

}  // namespace devmem::app
