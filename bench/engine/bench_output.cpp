// `devmem bench`, the output: the report as a text table, JSON or CSV. A file of its own so that
// the formats sit together, apart from the sweep (bench_measure.cpp) that fills the report.
#include "bench_report.hpp"

#include <devmem/devmem.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devmem::app {

namespace {

// ---- Output -------------------------------------------------------------------------------------

/// The lines of the text table, each added with its newline.
struct TableLines {
  std::string out;
  void operator()(std::string_view text) {
    out += text;
    out += '\n';
  }
};

/// Contiguous copies, one group per direction and memory kind.
void table_transfers(const Report& r, TableLines& line) {
  if (!r.copies.empty()) {
    line("");
    line("Transfers (GB/s = 1e9 bytes/s; ratio = devmem / raw, above 1 devmem is faster)");
    line(fmt::format("{:>9}  {:<4} {:<9} {:>6} {:>12} {:>12} {:>8}", "size", "dir", "memory", "ops",
                     "devmem GB/s", "raw GB/s", "ratio"));
    const CopyResult* previous = nullptr;
    for (const CopyResult& c : r.copies) {
      if (previous != nullptr &&
          (previous->direction != c.direction || previous->memory != c.memory)) {
        line("");
      }
      previous = &c;
      line(fmt::format("{:>9}  {:<4} {:<9} {:>6} {:>12.3f} {:>12.3f} {:>7.2f}x",
                       devmem::format_bytes(c.bytes), to_string(c.direction), to_string(c.memory),
                       c.ops_per_sample, c.devmem_gbps(), c.raw_gbps(), c.ratio()));
    }
  }
}

/// Strided copies against the raw contiguous copy of the same bytes and, like with like, the plain
/// loop over the same layout.
void table_strided(const Report& r, TableLines& line) {
  if (!r.strided.empty()) {
    const bool loops = std::any_of(r.strided.begin(), r.strided.end(),
                                   [](const StridedResult& c) { return c.has_loop(); });
    line("");
    line(fmt::format(
        "Strided transfers: a {}^4 float32 array, strided on the device side, dense on the other "
        "(vs contiguous = strided GB/s / raw contiguous GB/s of the same bytes, the bound a "
        "strided copy can approach{})",
        r.strided.front().side,
        loops ? "; vs loop = against a plain 1-thread loop over the same layout, like with like"
              : "; no plain-loop column: on a GPU the plain version is a kernel"));
    line(fmt::format("{:<18} {:<4} {:<9} {:>9} {:>6} {:>12} {:>12} {:>14}{}", "layout", "dir",
                     "memory", "size", "ops", "devmem GB/s", "raw GB/s", "vs contiguous",
                     loops ? fmt::format(" {:>10} {:>8}", "loop GB/s", "vs loop") : ""));
    for (const StridedResult& c : r.strided) {
      line(fmt::format("{:<18} {:<4} {:<9} {:>9} {:>6} {:>12.3f} {:>12.3f} {:>13.2f}x{}", c.layout,
                       to_string(c.direction), to_string(c.memory), devmem::format_bytes(c.bytes),
                       c.ops_per_sample, c.devmem_gbps(), c.raw_gbps(), c.ratio(),
                       c.has_loop()
                           ? fmt::format(" {:>10.3f} {:>7.2f}x", c.loop_gbps(), c.ratio_vs_loop())
                           : ""));
    }
  }
}

/// Allocation latency, the first-use cost and the enqueue cost.
void table_allocations(const Report& r, TableLines& line) {
  if (!r.allocations.empty()) {
    line("");
    line(
        fmt::format("Allocation latency: allocate + free, ns (raw: {}; direct and pool: a "
                    "device array through that memory manager)",
                    r.raw_alloc_call));
    line(fmt::format("{:>9} {:>10} {:>10} {:>10} {:>12} {:>10}", "size", "raw", "direct", "pool",
                     "direct/pool", "raw/pool"));
    for (const AllocResult& a : r.allocations) {
      line(fmt::format("{:>9} {:>10.0f} {:>10.0f} {:>10.0f} {:>11.1f}x {:>9.1f}x",
                       devmem::format_bytes(a.bytes), a.raw_ns, a.direct_ns, a.pool_ns,
                       a.direct_ns / a.pool_ns, a.raw_ns / a.pool_ns));
    }
  }
  if (r.first_use) {
    const FirstUseResult& f = *r.first_use;
    line(fmt::format(
        "Allocate + write every byte + free, {}: direct {:.2f} ms, pool {:.2f} ms "
        "({:.1f}x)",
        devmem::format_bytes(f.bytes), f.direct_ms, f.pool_ms, f.direct_ms / f.pool_ms));
  }
  if (r.enqueue) {
    const EnqueueResult& e = *r.enqueue;
    line("");
    line(
        fmt::format("Enqueue cost of one asynchronous {} B pinned H2D copy on a stream (host "
                    "time per call): devmem API {:.0f} ns, Backend::copy {:.0f} ns, raw {}",
                    e.bytes, e.api_ns, e.backend_ns,
                    e.raw_ns < 0 ? std::string("n/a (memcpy has no enqueue)")
                                 : fmt::format("{} {:.0f} ns", r.raw_copy_call, e.raw_ns)));
  }
}

/// The simulator against plain loops, or why it was not measured.
void table_kernels(const Report& r, TableLines& line) {
  if (!r.kernels.empty()) {
    line("");
    line(
        "Kernels in the host backend's simulator against the same computation as a plain C++ "
        "loop in this program (per launch / per loop run; slower = kernel / loop)");
    line(fmt::format("{:<10} {:>8} {:>8} {:>6} {:>12} {:>12} {:>12} {:>9}", "kernel", "size",
                     "threads", "calls", "per launch", "plain loop", "threads/s", "slower"));
    for (const KernelResult& k : r.kernels) {
      line(fmt::format("{:<10} {:>8} {:>8} {:>6} {:>9.3f} ms {:>9.3f} ms {:>10.1f} M {:>8.1f}x",
                       k.kernel, k.size, k.threads, k.launches_per_sample, k.kernel_seconds * 1e3,
                       k.loop_seconds * 1e3, k.threads_per_second() / 1e6, k.slowdown()));
    }
  }
  if (!r.kernels_skipped.empty()) {
    line("");
    line(fmt::format("Kernels: not measured: {}", r.kernels_skipped));
  }
}

/// Each goal, measured and met or missed.
void table_goals(const Report& r, TableLines& line) {
  if (!r.goals.empty()) {
    line("");
    line("Goals");
    for (const Goal& g : r.goals) {
      line(fmt::format("  {:<48} {:>10.2f} {:<2} (goal {} {:g} {}) {}", g.name, g.measured, g.unit,
                       g.at_most ? "<=" : ">=", g.target, g.unit, g.met() ? "met" : "MISSED"));
    }
  }
}

}  // namespace

std::string print_table(const Report& r) {
  TableLines line;
  line(fmt::format("devmem bench: backend {}, device {} ({}), devmem {}, {}", r.backend, r.device,
                   r.architecture, r.version, r.date));
  line(fmt::format("raw baseline: {} / {}; medians of {} repeats after a warm-up{}",
                   r.raw_copy_call, r.raw_alloc_call, r.repeats, r.quick ? " (--quick)" : ""));
  table_transfers(r, line);
  table_strided(r, line);
  table_allocations(r, line);
  table_kernels(r, line);
  table_goals(r, line);
  return line.out;
}

namespace {

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

/// A JSON number; non-finite values (a copy too fast to time) become null.
std::string json_number(double value) {
  return std::isfinite(value) ? fmt::format("{:.6g}", value) : "null";
}

/// `  "name": [rows],` with one row (a JSON object from `row`) per item, as the JSON output
/// writes every list; `last`: no comma after it.
template <class Item, class Row>
std::string json_list(std::string_view name, const std::vector<Item>& items, Row row,
                      bool last = false) {
  std::string out = fmt::format("  \"{}\": [", name);
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += fmt::format("{}\n    {}", i == 0 ? "" : ",", row(items[i]));
  }
  out += items.empty() ? "]" : "\n  ]";
  return out + (last ? "\n" : ",\n");
}

}  // namespace

std::string print_json(const Report& r) {
  std::string out = "{\n";
  out += fmt::format(
      "  \"backend\": {}, \"device\": {}, \"architecture\": {}, \"devmem_version\": {},\n"
      "  \"date\": {}, \"raw_copy_call\": {}, \"raw_alloc_call\": {}, \"repeats\": {}, "
      "\"quick\": {},\n",
      json_string(r.backend), json_string(r.device), json_string(r.architecture),
      json_string(r.version), json_string(r.date), json_string(r.raw_copy_call),
      json_string(r.raw_alloc_call), r.repeats, r.quick);
  out += json_list("copies", r.copies, [](const CopyResult& c) {
    return fmt::format(
        "{{\"direction\": \"{}\", \"memory\": \"{}\", \"bytes\": {}, \"ops_per_sample\": "
        "{}, \"devmem_gbps\": {}, \"raw_gbps\": {}, \"ratio\": {}}}",
        to_string(c.direction), to_string(c.memory), c.bytes, c.ops_per_sample,
        json_number(c.devmem_gbps()), json_number(c.raw_gbps()), json_number(c.ratio()));
  });
  out += json_list("strided", r.strided, [](const StridedResult& c) {
    return fmt::format(
        "{{\"layout\": {}, \"direction\": \"{}\", \"memory\": \"{}\", \"side\": {}, "
        "\"bytes\": {}, \"ops_per_sample\": {}, \"devmem_gbps\": {}, \"raw_gbps\": {}, "
        "\"ratio\": {}, \"loop_gbps\": {}, \"ratio_vs_loop\": {}}}",
        json_string(c.layout), to_string(c.direction), to_string(c.memory), c.side, c.bytes,
        c.ops_per_sample, json_number(c.devmem_gbps()), json_number(c.raw_gbps()),
        json_number(c.ratio()), c.has_loop() ? json_number(c.loop_gbps()) : "null",
        c.has_loop() ? json_number(c.ratio_vs_loop()) : "null");
  });
  out += json_list("allocations", r.allocations, [](const AllocResult& a) {
    return fmt::format(
        "{{\"bytes\": {}, \"raw_ns\": {}, \"direct_ns\": {}, \"pool_ns\": {}, "
        "\"direct_over_pool\": {}, \"raw_over_pool\": {}}}",
        a.bytes, json_number(a.raw_ns), json_number(a.direct_ns), json_number(a.pool_ns),
        json_number(a.direct_ns / a.pool_ns), json_number(a.raw_ns / a.pool_ns));
  });
  if (r.first_use) {
    out += fmt::format(
        "  \"first_use\": {{\"bytes\": {}, \"direct_ms\": {}, \"pool_ms\": {}, \"ratio\": {}}},\n",
        r.first_use->bytes, json_number(r.first_use->direct_ms), json_number(r.first_use->pool_ms),
        json_number(r.first_use->direct_ms / r.first_use->pool_ms));
  } else {
    out += "  \"first_use\": null,\n";
  }
  if (r.enqueue) {
    out += fmt::format(
        "  \"enqueue\": {{\"bytes\": {}, \"api_ns\": {}, \"backend_ns\": {}, \"raw_ns\": {}}},\n",
        r.enqueue->bytes, json_number(r.enqueue->api_ns), json_number(r.enqueue->backend_ns),
        r.enqueue->raw_ns < 0 ? "null" : json_number(r.enqueue->raw_ns));
  } else {
    out += "  \"enqueue\": null,\n";
  }
  out += json_list("kernels", r.kernels, [](const KernelResult& k) {
    return fmt::format(
        "{{\"kernel\": {}, \"size\": {}, \"bytes\": {}, \"threads\": {}, "
        "\"launches_per_sample\": {}, \"seconds_per_launch\": {}, \"loop_seconds\": {}, "
        "\"threads_per_second\": {}, \"slowdown\": {}, \"ratio\": {}}}",
        json_string(k.kernel), k.size, k.bytes, k.threads, k.launches_per_sample,
        json_number(k.kernel_seconds), json_number(k.loop_seconds),
        json_number(k.threads_per_second()), json_number(k.slowdown()),
        json_number(k.loop_seconds / k.kernel_seconds));
  });
  out += fmt::format("  \"kernels_skipped\": {},\n",
                     r.kernels_skipped.empty() ? "null" : json_string(r.kernels_skipped));
  out += json_list(
      "goals", r.goals,
      [](const Goal& g) {
        return fmt::format(
            "{{\"name\": {}, \"measured\": {}, \"target\": {}, \"comparison\": \"{}\", "
            "\"unit\": {}, \"met\": {}}}",
            json_string(g.name), json_number(g.measured), json_number(g.target),
            g.at_most ? "<=" : ">=", json_string(g.unit), g.met());
      },
      true);
  return out + "}\n";
}

namespace {

constexpr std::string_view kCsvHeader = "measurement,direction,memory,bytes,devmem,raw,unit,ratio";

}  // namespace

/// One row per number pair; ratio is always "devmem is this many times faster than raw".
std::string print_csv(const Report& r) {
  std::string out(kCsvHeader);
  out += '\n';
  for (const CopyResult& c : r.copies) {
    out += fmt::format("copy,{},{},{},{},{},GB/s,{}\n", to_string(c.direction), to_string(c.memory),
                       c.bytes, json_number(c.devmem_gbps()), json_number(c.raw_gbps()),
                       json_number(c.ratio()));
  }
  for (const StridedResult& c : r.strided) {
    out += fmt::format("strided-{},{},{},{},{},{},GB/s,{}\n", c.layout, to_string(c.direction),
                       to_string(c.memory), c.bytes, json_number(c.devmem_gbps()),
                       json_number(c.raw_gbps()), json_number(c.ratio()));
    if (c.has_loop()) {  // the same copy against the plain loop over its layout
      out += fmt::format("strided-{}-vs-loop,{},{},{},{},{},GB/s,{}\n", c.layout,
                         to_string(c.direction), to_string(c.memory), c.bytes,
                         json_number(c.devmem_gbps()), json_number(c.loop_gbps()),
                         json_number(c.ratio_vs_loop()));
    }
  }
  for (const AllocResult& a : r.allocations) {
    out += fmt::format("alloc-direct,,device,{},{},{},ns,{}\n", a.bytes, json_number(a.direct_ns),
                       json_number(a.raw_ns), json_number(a.raw_ns / a.direct_ns));
    out += fmt::format("alloc-pool,,device,{},{},{},ns,{}\n", a.bytes, json_number(a.pool_ns),
                       json_number(a.raw_ns), json_number(a.raw_ns / a.pool_ns));
  }
  if (r.enqueue && r.enqueue->raw_ns >= 0) {
    out += fmt::format("enqueue,h2d,pinned,{},{},{},ns,{}\n", r.enqueue->bytes,
                       json_number(r.enqueue->api_ns), json_number(r.enqueue->raw_ns),
                       json_number(r.enqueue->raw_ns / r.enqueue->api_ns));
  } else if (r.enqueue) {
    out += fmt::format("enqueue,h2d,pinned,{},{},,ns,\n", r.enqueue->bytes,
                       json_number(r.enqueue->api_ns));
  }
  // devmem: the kernel, raw: the plain loop, seconds per run; bytes: the arrays it reads and
  // writes (the size is in the measurement's name).
  for (const KernelResult& k : r.kernels) {
    out += fmt::format("kernel-{}-{},,device,{},{},{},s,{}\n", k.kernel, k.size, k.bytes,
                       json_number(k.kernel_seconds), json_number(k.loop_seconds),
                       json_number(k.loop_seconds / k.kernel_seconds));
  }
  return out;
}

}  // namespace devmem::app
