// The raw baseline of the GPU runtimes, written once over a small traits struct (`Vendor`) that
// raw_baseline_cuda.cpp and raw_baseline_roc.cpp fill with the CUDA and HIP calls. The
// measurement is what a hand-written program would do: one stream of its own, two timing events
// around a batch of cudaMemcpyAsync / hipMemcpyAsync calls, buffers allocated with the vendor's
// malloc / hostAlloc. Included only by those two files.
//
// What `Vendor` provides: Error, Stream, Event; kSuccess; static calls returning Error: malloc,
// free, hostAlloc(ptr, bytes, mapped), hostFree, streamCreate, streamDestroy, streamSynchronize,
// eventCreate, eventDestroy, eventRecord, eventSynchronize, eventElapsedTime, memsetAsync,
// memcpyAsync(dst, src, bytes, Direction, stream); errorString(Error); names kCopyCall,
// kAllocCall, kPrefix.
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
  using VendorError = typename Vendor::Error;
  using Stream = typename Vendor::Stream;
  using Event = typename Vendor::Event;

  VendorBaseline() {
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

  [[nodiscard]] std::string copy_call() const override { return std::string(Vendor::kCopyCall); }
  [[nodiscard]] std::string alloc_call() const override { return std::string(Vendor::kAllocCall); }

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
      check(Vendor::memcpyAsync(dst, src, bytes, direction, stream_), "copying");
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

  double time_enqueue(std::size_t bytes, int count) override {
    prepare(Direction::HostToDevice, HostMemory::Pinned, bytes);
    void* dst = device_a_.get(bytes);
    const void* src = host_.at(HostMemory::Pinned).get(bytes);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) {
      check(Vendor::memcpyAsync(dst, src, bytes, Direction::HostToDevice, stream_), "copying");
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
  static void check(VendorError error, const char* what) {
    if (error == Vendor::kSuccess) return;
    throw devmem::Error(fmt::format("{} baseline: {} failed: {}", Vendor::kPrefix, what,
                                    Vendor::errorString(error)));
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
      check(Vendor::memsetAsync(p, 1, wanted, nullptr), "writing device memory");
      check(Vendor::streamSynchronize(nullptr), "synchronizing");
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
          ::operator delete (p, std::align_val_t{4096});
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
        data = std::unique_ptr<void, Free>(::operator new (wanted, std::align_val_t{4096}),
                                           Free{false});
      } else {
        void* p = nullptr;
        check(Vendor::hostAlloc(&p, wanted, memory == HostMemory::Mapped),
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

  Stream stream_{};
  Event start_{};
  Event end_{};
  DeviceBuffer device_a_;
  DeviceBuffer device_b_;
  std::map<HostMemory, HostBuffer> host_;
};

}  // namespace devmem::app
