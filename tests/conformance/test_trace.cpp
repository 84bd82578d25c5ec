// The memory timeline (include/devmem/trace.hpp): a TraceSession records what the program did, on
// every backend, and summarize_trace reads the file back. The file's JSON is checked whole by the
// app:trace-* tests (CMake's JSON parser) and by the Python suite (the json module).
#include "support.hpp"

#include <devmem/trace.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace conformance;
using Catch::Matchers::Contains;
using Catch::Matchers::Message;

namespace {

std::filesystem::path temporary_trace_path() {
  char path[] = "/tmp/devmem-trace-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  return path;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The file's lines whose category is `category` (devmem writes one event per line).
int count_lines_with(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("trace: allocations, copies, synchronizations and deferred frees are recorded",
          "[trace]") {
  MemoryStateGuard guard;
  const auto& ctx = guard.context();
  const std::filesystem::path path = temporary_trace_path();
  constexpr std::int64_t kCount = 4096;  // 32 KiB of float64
  {
    devmem::TraceSession session = devmem::trace_to(path);
    CHECK(devmem::tracing());
    CHECK(session.path() == path);
    const devmem::HostArray host = iota_host(Shape{kCount});
    {
      const devmem::DeviceArray a = devmem::to_device(host);
      const devmem::DeviceArray b = devmem::device_array(Shape{kCount}, f8());
      b.copy_to_device(a);
      const devmem::HostArray back = b.copy_to_host();
      CHECK(std::memcmp(back.data(), host.data(), kCount * 8) == 0);
      devmem::stream().synchronize();
      ctx->synchronize();
    }
    ctx->flush_deallocations();
    CHECK(session.events() > 0);
    session.stop();
    CHECK_FALSE(devmem::tracing());
    session.stop();  // a second stop does nothing
  }
  const std::string text = read_file(path);
  CHECK(text.starts_with("[\n"));
  CHECK(text.ends_with("]\n"));
  CHECK(count_lines_with(text, "\"cat\":\"alloc\"") == 2);
  CHECK(count_lines_with(text, "\"cat\":\"free\"") == 2);

  const devmem::TraceSummary summary = devmem::summarize_trace(path);
  CHECK(summary.events > 0);
  REQUIRE(summary.peaks.size() == 1);
  CHECK(summary.peaks[0].device == ctx->device());
  // Both arrays were alive together: the counter saw both.
  CHECK(summary.peaks[0].peak_bytes >= 2 * kCount * 8);
  REQUIRE_FALSE(summary.top_sites.empty());
  std::int64_t allocated = 0;
  for (const auto& site : summary.top_sites) allocated += site.bytes;
  CHECK(allocated == 2 * kCount * 8);
  std::int64_t h2d = 0;
  std::int64_t d2h = 0;
  std::int64_t d2d = 0;
  for (const auto& t : summary.transfers) {
    if (t.direction == "h2d") h2d = t.bytes;
    if (t.direction == "d2h") d2h = t.bytes;
    if (t.direction == "d2d") d2d = t.bytes;
  }
  CHECK(h2d == kCount * 8);
  CHECK(d2h == kCount * 8);
  CHECK(d2d == kCount * 8);
  CHECK(summary.synchronizations >= 2);
  CHECK(summary.flushes >= 1);
  REQUIRE(summary.longest_deferred.size() == 2);
  CHECK(summary.longest_deferred[0].bytes == kCount * 8);
  CHECK(summary.longest_deferred[0].deferred_seconds >=
        summary.longest_deferred[1].deferred_seconds);
  std::filesystem::remove(path);
}

TEST_CASE("trace: the pool's hits and misses and its cached bytes", "[trace]") {
  MemoryStateGuard guard;
  const auto& ctx = guard.context();
  ctx->set_memory_manager(std::make_shared<devmem::PoolMemoryManager>(*ctx));
  const std::filesystem::path path = temporary_trace_path();
  {
    devmem::TraceSession session = devmem::trace_to(path);
    for (int i = 0; i < 3; ++i) {
      {
        const devmem::DeviceArray a = devmem::device_array(Shape{1000}, f8());
        a.memset(0);
        ctx->synchronize();
      }
      ctx->flush_deallocations();  // the block goes back to the pool, the next round reuses it
    }
  }
  const devmem::TraceSummary summary = devmem::summarize_trace(path);
  CHECK(summary.pool_misses == 1);
  CHECK(summary.pool_hits == 2);
  CHECK(count_lines_with(read_file(path), "\"name\":\"pool cached\"") >= 3);
  std::filesystem::remove(path);
}

TEST_CASE("trace: one trace at a time, and errors name the paths", "[trace]") {
  const std::filesystem::path path = temporary_trace_path();
  {
    devmem::TraceSession session = devmem::trace_to(path);
    CHECK_THROWS_MATCHES(
        (void)devmem::trace_to("/tmp/devmem-second-trace.json"), devmem::InvalidArgument,
        Message("trace_to('/tmp/devmem-second-trace.json'): a trace is already being written to '" +
                path.string() + "' (DEVMEM_TRACE or another TraceSession); stop it first"));
    // A moved session is the one that ends the trace.
    devmem::TraceSession moved = std::move(session);
    CHECK(devmem::tracing());
  }
  CHECK_FALSE(devmem::tracing());
  CHECK_THROWS_WITH((void)devmem::trace_to("/nonexistent/dir/trace.json"),
                    Contains("trace: cannot create '/nonexistent/dir/trace.json'"));
  CHECK_FALSE(devmem::tracing());
  // A new trace can start once the last one ended.
  { const devmem::TraceSession again = devmem::trace_to(path); }
  std::filesystem::remove(path);
}

TEST_CASE("trace: summarize_trace refuses what devmem did not write, naming the line", "[trace]") {
  const std::filesystem::path path = temporary_trace_path();
  {
    std::ofstream out(path);
    out << "[\n{\"name\":\"x\",\"cat\":\"alloc\",\"ph\":\"i\",\"ts\":1,\"args\":{\"a\":[1]}}\n]\n";
  }
  CHECK_THROWS_WITH(devmem::summarize_trace(path),
                    Contains("line 2: expected a number or a string at column"));
  {
    std::ofstream out(path);
    out << "{\"traceEvents\": []}\n";
  }
  CHECK_THROWS_WITH(devmem::summarize_trace(path), Contains("line 1: not a trace devmem wrote"));
  std::filesystem::remove(path);
  CHECK_THROWS_WITH(devmem::summarize_trace(path), Contains("cannot open '" + path.string() + "'"));
}

namespace {

// Allocates from a function of this program (not inline: its own frame is the call site).
[[gnu::noinline]] devmem::DeviceArray allocate_for_call_site_test() {
  return devmem::device_array(Shape{1000}, f8());
}

}  // namespace

TEST_CASE("trace: with call sites, each allocation names the first caller outside devmem",
          "[trace]") {
  MemoryStateGuard guard;
  const std::filesystem::path plain = temporary_trace_path();
  const std::filesystem::path with_sites = temporary_trace_path();
  {
    devmem::TraceSession session = devmem::trace_to(plain);
    { const devmem::DeviceArray a = allocate_for_call_site_test(); }
  }
  {
    devmem::TraceSession session =
        devmem::trace_to(with_sites, devmem::TraceOptions{.call_sites = true});
    { const devmem::DeviceArray a = allocate_for_call_site_test(); }
    { const devmem::HostArray p = devmem::pinned_array(Shape{100}, f8()); }
  }
  // Without the option the site is empty; with it, the conformance program itself (its functions
  // are not exported: "?" and the offset that addr2line resolves).
  CHECK(count_lines_with(read_file(plain), "\"site\":\"\"") == 1);
  const std::string program = std::filesystem::read_symlink("/proc/self/exe").filename().string();
  const std::string text = read_file(with_sites);
  INFO(text);
  CHECK(count_lines_with(text, "\"cat\":\"alloc\"") == 2);
  // Two frames each: the test's function and its caller (Catch2's, also in this program).
  CHECK(count_lines_with(text, "(" + program + "+0x") == 4);
  CHECK(count_lines_with(text, "\"site\":\"\"") == 0);

  const devmem::TraceSummary summary = devmem::summarize_trace(with_sites);
  REQUIRE(summary.top_sites.size() == 2);
  for (const auto& site : summary.top_sites) CHECK_THAT(site.call_site, Contains(program + "+0x"));
  CHECK(devmem::summarize_trace(plain).top_sites.at(0).call_site.empty());
  std::filesystem::remove(plain);
  std::filesystem::remove(with_sites);
}
