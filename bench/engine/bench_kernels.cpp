#include "bench_kernels.hpp"

#include "bench/kernels.hpp"

#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace devmem::app {
namespace {

namespace k = devmem::bench_kernels;
using Clock = std::chrono::steady_clock;

/// Keeps the compiler from dropping or merging the plain loops: their results are observed.
void clobber(const void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

std::vector<float> pattern(std::int64_t count, std::uint32_t seed) {
  std::vector<float> v(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] =
        static_cast<float>((static_cast<std::uint32_t>(i) * 2654435761u + seed) % 1024) / 512.0f -
        1.0f;
  }
  return v;
}

/// One case: `launch` enqueues one kernel launch, `loop` runs the plain loop once; `check`
/// compares their results after one run of each from the same inputs (an exception if they
/// differ: a wrong kernel would make the comparison meaningless).
struct Case {
  std::string kernel;
  std::int64_t size;
  std::int64_t bytes;
  std::int64_t threads;
  std::function<void()> launch;
  std::function<void()> loop;
  std::function<void()> check;
};

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

/// Seconds per call of `op` (warmed up already): calls per sample chosen from one timed call so
/// that a sample lasts about `target` seconds; the median of `repeats` samples, the timed call
/// being the first when one call is a sample.
double seconds_per_call(const std::function<void()>& op, int repeats, double target, int* calls) {
  const auto time = [&](int count) {
    const auto start = Clock::now();
    for (int i = 0; i < count; ++i) op();
    current_context()->synchronize();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  const double one = std::max(time(1), 1e-9);
  const int count = static_cast<int>(std::clamp(target / one, 1.0, 100000.0));
  std::vector<double> samples;
  if (count == 1) samples.push_back(one);
  while (static_cast<int>(samples.size()) < repeats) samples.push_back(time(count) / count);
  *calls = count;
  return median(std::move(samples));
}

void expect_close(std::string_view what, const float* got, const float* want, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const float tolerance = 1e-3f * std::max(1.0f, std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= tolerance)) {
      throw Error(
          fmt::format("devmem bench: the {} kernel computed {} at element {}, the plain "
                      "loop {}",
                      what, got[i], i, want[i]));
    }
  }
}

Case saxpy_case(std::int64_t n) {
  auto x = std::make_shared<std::vector<float>>(pattern(n, 1));
  auto y = std::make_shared<std::vector<float>>(pattern(n, 2));
  const DeviceArray dx = to_device(*x);
  const DeviceArray dy = to_device(*y);
  constexpr float a = 0.5f;
  const auto blocks = static_cast<unsigned>((n + k::kBlock - 1) / k::kBlock);
  Case c{"saxpy", n, 2 * n * 4, std::int64_t{blocks} * k::kBlock, nullptr, nullptr, nullptr};
  c.launch = [=] { launch({blocks, k::kBlock}, k::saxpy, dx, dy, a); };
  c.loop = [=] {
    float* py = y->data();
    const float* px = x->data();
    for (std::int64_t i = 0; i < n; ++i) py[i] = a * px[i] + py[i];
    clobber(py);
  };
  c.check = [=] {
    dy.copy_to_device(*y);
    launch({blocks, k::kBlock}, k::saxpy, dx, dy, a);
    const HostArray got = dy.copy_to_host();
    float* py = y->data();
    for (std::int64_t i = 0; i < n; ++i) py[i] = a * (*x)[static_cast<std::size_t>(i)] + py[i];
    expect_close("saxpy", got.data_as<float>(), py, y->size());
  };
  return c;
}

Case reduction_case(std::int64_t n) {
  auto x = std::make_shared<std::vector<float>>(pattern(n, 3));
  const auto blocks = static_cast<unsigned>((n + k::kBlock - 1) / k::kBlock);
  auto sums = std::make_shared<std::vector<float>>(blocks);
  const DeviceArray dx = to_device(*x);
  const DeviceArray dsums = device_array<float>({std::int64_t{blocks}});
  Case c{"reduction", n, n * 4, std::int64_t{blocks} * k::kBlock, nullptr, nullptr, nullptr};
  c.launch = [=] { launch({blocks, k::kBlock}, k::block_sum, dx, dsums); };
  c.loop = [=] {
    const float* px = x->data();
    float* ps = sums->data();
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t end = std::min(n, (b + 1) * std::int64_t{k::kBlock});
      float s = 0.0f;
      for (std::int64_t i = b * k::kBlock; i < end; ++i) s += px[i];
      ps[b] = s;
    }
    clobber(ps);
  };
  c.check = [=, loop = c.loop] {
    launch({blocks, k::kBlock}, k::block_sum, dx, dsums);
    const HostArray got = dsums.copy_to_host();
    loop();
    expect_close("reduction", got.data_as<float>(), sums->data(), sums->size());
  };
  return c;
}

Case matmul_case(std::int64_t n) {
  auto a = std::make_shared<std::vector<float>>(pattern(n * n, 4));
  auto b = std::make_shared<std::vector<float>>(pattern(n * n, 5));
  auto c_host = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n * n));
  const DeviceArray da = to_device(HostArray::view(*a).reshape({n, n}));
  const DeviceArray db = to_device(HostArray::view(*b).reshape({n, n}));
  const DeviceArray dc = device_array<float>({n, n});
  const auto blocks = static_cast<unsigned>((n + k::kTile - 1) / k::kTile);
  const LaunchConfig config{Dim3(blocks, blocks), Dim3(k::kTile, k::kTile)};
  Case c{"matmul", n,       3 * n * n * 4, std::int64_t{blocks} * blocks * k::kTile * k::kTile,
         nullptr,  nullptr, nullptr};
  c.launch = [=] { launch(config, k::tiled_matmul, da, db, dc); };
  // The loop a C++ programmer writes: i-k-j order, so the innermost loop runs along rows.
  c.loop = [=] {
    const float* pa = a->data();
    const float* pb = b->data();
    float* pc = c_host->data();
    std::fill(pc, pc + n * n, 0.0f);
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t kk = 0; kk < n; ++kk) {
        const float aik = pa[i * n + kk];
        for (std::int64_t j = 0; j < n; ++j) pc[i * n + j] += aik * pb[kk * n + j];
      }
    }
    clobber(pc);
  };
  c.check = [=, loop = c.loop] {
    launch(config, k::tiled_matmul, da, db, dc);
    const HostArray got = dc.copy_to_host();
    loop();
    expect_close("matmul", got.data_as<float>(), c_host->data(), c_host->size());
  };
  return c;
}

Case transpose_case(std::int64_t n) {
  auto in = std::make_shared<std::vector<float>>(pattern(n * n, 6));
  auto out = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n * n));
  const DeviceArray din = to_device(HostArray::view(*in).reshape({n, n}));
  const DeviceArray dout = device_array<float>({n, n});
  const auto blocks = static_cast<unsigned>((n + k::kTile - 1) / k::kTile);
  const LaunchConfig config{Dim3(blocks, blocks), Dim3(k::kTile, k::kTile)};
  Case c{"transpose", n,       2 * n * n * 4, std::int64_t{blocks} * blocks * k::kTile * k::kTile,
         nullptr,     nullptr, nullptr};
  c.launch = [=] { launch(config, k::transpose, din, dout); };
  c.loop = [=] {
    const float* pi = in->data();
    float* po = out->data();
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < n; ++j) po[j * n + i] = pi[i * n + j];
    }
    clobber(po);
  };
  c.check = [=, loop = c.loop] {
    launch(config, k::transpose, din, dout);
    const HostArray got = dout.copy_to_host();
    loop();
    expect_close("transpose", got.data_as<float>(), out->data(), out->size());
  };
  return c;
}

struct CaseSpec {
  std::string_view kernel;
  std::int64_t size;
  Case (*make)(std::int64_t);
};

const std::vector<CaseSpec>& case_specs() {
  static const std::vector<CaseSpec> specs{
      {"saxpy", std::int64_t{1} << 14, saxpy_case},
      {"saxpy", std::int64_t{1} << 20, saxpy_case},
      {"reduction", std::int64_t{1} << 14, reduction_case},
      {"reduction", std::int64_t{1} << 20, reduction_case},
      {"matmul", 128, matmul_case},
      {"matmul", 256, matmul_case},
      {"matmul", 512, matmul_case},
      {"transpose", 1024, transpose_case},
  };
  return specs;
}

}  // namespace

std::vector<std::string> kernel_case_labels() {
  std::vector<std::string> labels;
  for (const CaseSpec& s : case_specs())
    labels.push_back(fmt::format("kernel {} {}", s.kernel, s.size));
  return labels;
}

std::vector<KernelResult> measure_kernels(int repeats, bool quick,
                                          const std::function<void(std::string_view)>& step) {
  std::vector<KernelResult> results;
  const std::vector<std::string> labels = kernel_case_labels();
  // Long enough that a sample is not one descheduling away from an outlier, short enough for a
  // quick run to take seconds.
  const double target = quick ? 0.005 : 0.02;
  // The largest cases take most of a second per launch: a quick run takes fewer samples.
  if (quick) repeats = std::min(repeats, 3);
  for (std::size_t i = 0; i < case_specs().size(); ++i) {
    const CaseSpec& spec = case_specs()[i];
    step(labels[i]);
    const Case c = spec.make(spec.size);
    c.check();  // also the warm-up of both
    int launches = 0;
    int loops = 0;
    const double kernel_s = seconds_per_call(c.launch, repeats, target, &launches);
    const double loop_s = seconds_per_call(c.loop, repeats, target, &loops);
    results.push_back({c.kernel, c.size, c.bytes, c.threads, launches, kernel_s, loop_s});
  }
  return results;
}

}  // namespace devmem::app
