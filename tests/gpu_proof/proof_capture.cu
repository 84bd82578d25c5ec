// The GPU proof's capture step (scripts/gpu-proof.sh): each kind of devmem operation is put on a
// devmem stream while CUDA captures that stream into a graph (cudaStreamBeginCapture), then the
// graph is launched twice and the data checked after each replay. An operation passes when either
//   - it was captured and both replays give the right data, or
//   - devmem refused it with InvalidArgument naming "capture" while the capture was still intact
//     (no vendor call broke it), which is the documented alternative.
// Anything else (a BackendError, an invalidated capture, wrong data) fails. One line per operation
// on stdout: "capture <operation>: ok (...)" or "capture <operation>: FAILED (...)". Run with
// DEVMEM_MEMORY_MANAGER=pool so that the allocation can be served from the pool.
// Exit codes: 0 every operation passed, 1 one failed, 77 no device.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

namespace {

DEVMEM_KERNEL void add_one(devmem::ArrayView<float, 1> data) {
  const std::int64_t i = devmem::global_id(0);
  if (i < data.shape(0)) data(i) += 1.0f;
}

constexpr std::int64_t kRows = 64;
constexpr std::int64_t kCols = 48;
constexpr std::int64_t kCount = kRows * kCols;

std::vector<float> iota_values(float first) {
  std::vector<float> values(kCount);
  std::iota(values.begin(), values.end(), first);
  return values;
}

/// One operation to capture: `enqueue` puts it on the stream; `reset` (outside the capture)
/// restores the destination before each replay; `check` says what is wrong after replay `round`
/// (1 or 2), empty when the data is right.
struct Operation {
  std::string name;
  std::function<void(const devmem::Stream&)> enqueue;
  std::function<void(const devmem::Stream&)> reset;
  std::function<std::string(int round)> check;
};

std::string compare(const std::vector<float>& got, const std::vector<float>& expected) {
  if (got.size() != expected.size()) {
    return "size " + std::to_string(got.size()) + " != " + std::to_string(expected.size());
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i]) {
      return "element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
             std::to_string(expected[i]);
    }
  }
  return {};
}

cudaStream_t native(const devmem::Stream& stream) {
  return static_cast<cudaStream_t>(stream.native_handle());
}

std::string cuda_text(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

/// Captures `op` on a fresh stream and replays it twice; "ok (...)" or "FAILED (...)".
std::string prove(const Operation& op) {
  const devmem::Stream stream = devmem::stream();
  op.reset(stream);
  stream.synchronize();
  if (const cudaError_t e = cudaStreamBeginCapture(native(stream), cudaStreamCaptureModeGlobal);
      e != cudaSuccess) {
    return "FAILED (cudaStreamBeginCapture: " + cuda_text(e) + ")";
  }
  std::string refused;
  std::string thrown;
  try {
    op.enqueue(stream);
  } catch (const devmem::InvalidArgument& e) {
    refused = e.what();
  } catch (const std::exception& e) {
    thrown = e.what();
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t query = cudaStreamIsCapturing(native(stream), &status);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(native(stream), &graph);
  (void)cudaGetLastError();  // an invalidated capture leaves its error behind
  if (!refused.empty()) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    const bool names_capture = refused.find("capture") != std::string::npos;
    if (query == cudaSuccess && status == cudaStreamCaptureStatusActive && names_capture) {
      return "ok (refused before any vendor call: " + refused + ")";
    }
    return "FAILED (InvalidArgument, but the capture was " +
           std::string(status == cudaStreamCaptureStatusActive ? "intact" : "broken") +
           (names_capture ? "" : " and the message does not name the capture") + ": " + refused +
           ")";
  }
  if (!thrown.empty()) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    return "FAILED (threw during capture: " + thrown + ")";
  }
  if (ended != cudaSuccess || graph == nullptr) {
    return "FAILED (cudaStreamEndCapture: " + cuda_text(ended) + ")";
  }
  cudaGraphExec_t exec = nullptr;
  if (const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    return "FAILED (cudaGraphInstantiate: " + cuda_text(e) + ")";
  }
  std::string result = "ok (captured, replayed twice, data checked)";
  for (int round = 1; round <= 2; ++round) {
    if (round == 1 || op.name != "launch") op.reset(stream);
    cudaError_t e = cudaGraphLaunch(exec, native(stream));
    if (e == cudaSuccess) e = cudaStreamSynchronize(native(stream));
    if (e != cudaSuccess) {
      result = "FAILED (replay " + std::to_string(round) + ": " + cuda_text(e) + ")";
      break;
    }
    if (std::string wrong = op.check(round); !wrong.empty()) {
      result = "FAILED (replay " + std::to_string(round) + ": " + wrong + ")";
      break;
    }
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  return result;
}

}  // namespace

int main() {
  try {
    const devmem::Stream setup = devmem::stream();
    const std::vector<float> source_values = iota_values(1.0f);
    // Everything the captured work reads or writes is allocated before the capture.
    const devmem::DeviceArray matrix =
        devmem::to_device(devmem::HostArray::view(source_values).reshape({kRows, kCols}), setup);
    const devmem::DeviceArray transposed =
        devmem::device_array<float>({kCols, kRows}, devmem::Order::C, setup);
    const devmem::DeviceArray flat = devmem::device_array<float>({kCount}, devmem::Order::C, setup);
    const devmem::HostArray pinned = devmem::pinned_array<float>({kCount});
    std::vector<float> pageable(kCount, 0.0f);
    std::vector<float> strided_host(2 * kCount, -1.0f);
    for (std::int64_t i = 0; i < kCount; ++i) {
      strided_host[static_cast<std::size_t>(2 * i)] = static_cast<float>(i) * 0.5f;
    }
    setup.synchronize();
    std::vector<float> expected_transpose(kCount);
    for (std::int64_t r = 0; r < kRows; ++r) {
      for (std::int64_t c = 0; c < kCols; ++c) {
        expected_transpose[static_cast<std::size_t>(c * kRows + r)] =
            source_values[static_cast<std::size_t>(r * kCols + c)];
      }
    }
    const auto zero_device = [](const devmem::DeviceArray& array) {
      return [array](const devmem::Stream& stream) { array.fill(0.0f, stream); };
    };
    const auto read_flat = [&flat] { return flat.copy_to_host().to_vector<float>(); };
    std::vector<Operation> operations;
    operations.push_back(
        {"device-to-device strided (transpose)",
         [&](const devmem::Stream& s) { transposed.copy_to_device(matrix.T(), s); },
         zero_device(transposed),
         [&](int) {
           return compare(transposed.copy_to_host().to_vector<float>(), expected_transpose);
         }});
    operations.push_back({"host-to-device from pinned memory",
                          [&](const devmem::Stream& s) { flat.copy_to_device(pinned, s); },
                          [&](const devmem::Stream& s) {
                            flat.fill(0.0f, s);
                            for (std::int64_t i = 0; i < kCount; ++i)
                              pinned.at<float>(i) = static_cast<float>(i);
                          },
                          [&](int) { return compare(read_flat(), iota_values(0.0f)); }});
    operations.push_back({"host-to-device strided (pageable, every other element)",
                          [&](const devmem::Stream& s) {
                            flat.copy_to_device(
                                devmem::HostArray::view(strided_host).slice(0, 0, std::nullopt, 2),
                                s);
                          },
                          zero_device(flat),
                          [&](int) {
                            std::vector<float> expected(kCount);
                            for (std::int64_t i = 0; i < kCount; ++i) {
                              expected[static_cast<std::size_t>(i)] = static_cast<float>(i) * 0.5f;
                            }
                            return compare(read_flat(), expected);
                          }});
    operations.push_back(
        {"device-to-host into pageable memory",
         [&](const devmem::Stream& s) {
           matrix.reshape({kCount}).copy_to_host(devmem::HostArray::view(pageable), s);
         },
         [&](const devmem::Stream&) { std::fill(pageable.begin(), pageable.end(), 0.0f); },
         [&](int) { return compare(pageable, source_values); }});
    {
      // A pool allocation: a block of this size was freed into the pool before the capture.
      (void)devmem::device_array<float>({kCount}, devmem::Order::C, setup);
      setup.synchronize();
    }
    devmem::DeviceArray captured_allocation;
    operations.push_back({"allocation (pool manager)",
                          [&](const devmem::Stream& s) {
                            captured_allocation =
                                devmem::device_array<float>({kCount}, devmem::Order::C, s);
                          },
                          [](const devmem::Stream&) {},
                          [&](int) -> std::string {
                            if (captured_allocation.size() != kCount)
                              return "no array was allocated";
                            captured_allocation.fill(3.0f);
                            return compare(captured_allocation.copy_to_host().to_vector<float>(),
                                           std::vector<float>(kCount, 3.0f));
                          }});
    operations.push_back(
        {"launch",
         [&](const devmem::Stream& s) {
           devmem::launch({devmem::Dim3((kCount + 127) / 128), devmem::Dim3(128), s}, add_one,
                          flat);
         },
         zero_device(flat),
         [&](int round) {
           // The first replay runs on the zeros of reset; the second adds to the first.
           return compare(read_flat(), std::vector<float>(kCount, static_cast<float>(round)));
         }});
    int failed = 0;
    for (const Operation& op : operations) {
      std::string result;
      try {
        result = prove(op);
      } catch (const std::exception& e) {
        result = std::string("FAILED (") + e.what() + ")";
      }
      if (result.rfind("ok", 0) != 0) ++failed;
      std::printf("capture %s: %s\n", op.name.c_str(), result.c_str());
      std::fflush(stdout);
    }
    std::printf("capture: %d of %zu operations passed\n",
                static_cast<int>(operations.size()) - failed, operations.size());
    return failed == 0 ? 0 : 1;
  } catch (const devmem::NoDevice& e) {
    std::printf("proof_capture: no device: %s\n", e.what());
    return 77;
  } catch (const std::exception& e) {
    std::printf("proof_capture: %s\n", e.what());
    return 1;
  }
}
