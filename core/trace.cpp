// The trace recorder (core/trace.hpp) and TraceSession. The file is written as events happen, one
// event per line, in the trace-event format's JSON array form: a process that is killed leaves a
// file that Perfetto still opens (the format allows the closing bracket to be missing), and a long
// run does not keep its events in memory.
#include "core/trace.hpp"

#include <devmem/error.hpp>
#include <devmem/trace.hpp>

#include <fmt/format.h>

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace devmem::detail::trace {

std::atomic<bool> g_active{false};

namespace {

std::atomic<bool> g_call_sites{false};

struct Recorder {
  std::mutex mutex;
  std::FILE* file = nullptr;
  std::filesystem::path path;
  Clock::time_point origin;
  std::int64_t events = 0;
  std::int64_t dropped = 0;
  int next_thread = 1;
  int pid = 0;  // read once: getpid() is a system call in every glibc since 2.25
};

Recorder& recorder() {
  // Never destroyed: events can be recorded while the process exits, after static destructors.
  static auto* const instance = new Recorder;
  return *instance;
}

// A small number per thread for the file's "tid" (Perfetto draws one track per thread). An int:
// libdevmem's thread-local storage must stay tiny (it is static TLS, see host_kernel.cpp).
thread_local int t_thread = 0;

void append_escaped(std::string& out, std::string_view text) {
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

// Numbers by std::to_chars rather than fmt: an event is formatted at every recording place, and
// fmt's run-time format strings were most of an event's cost (about 10,000 instructions).
void append_integer(std::string& out, std::int64_t value) {
  char text[24];
  const auto result = std::to_chars(std::begin(text), std::end(text), value);
  out.append(text, result.ptr);
}

void append_fixed3(std::string& out, double value) {
  char text[64];
  const auto result =
      std::to_chars(std::begin(text), std::end(text), value, std::chars_format::fixed, 3);
  out.append(text, result.ptr);
}

void append_pointer(std::string& out, const void* value) {
  char text[24];
  const auto result =
      std::to_chars(std::begin(text), std::end(text), reinterpret_cast<std::uintptr_t>(value), 16);
  out += "\"0x";
  out.append(text, result.ptr);
  out.push_back('"');
}

void append_args(std::string& out, std::initializer_list<Arg> args) {
  out += ",\"args\":{";
  bool first = true;
  for (const Arg& arg : args) {
    if (!first) out.push_back(',');
    first = false;
    append_escaped(out, arg.key);
    out.push_back(':');
    std::visit(
        [&out](const auto& value) {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, std::string_view>) {
            append_escaped(out, value);
          } else if constexpr (std::is_same_v<T, const void*>) {
            append_pointer(out, value);
          } else if constexpr (std::is_same_v<T, double>) {
            append_fixed3(out, value);
          } else {
            append_integer(out, value);
          }
        },
        arg.value);
  }
  out += "}}";
}

double microseconds_since(Clock::time_point origin, Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t - origin).count();
}

// Writes one event line. `head` is the event's first fields after the name and category.
void write_event(std::string_view category, std::string_view name, std::string_view phase,
                 Clock::time_point start, const Clock::time_point* end,
                 std::initializer_list<Arg> args) noexcept {
  try {
    Recorder& r = recorder();
    std::string line;
    line.reserve(160);
    const std::lock_guard lock(r.mutex);
    if (r.file == nullptr) return;  // stopped between the caller's check and here
    if (t_thread == 0) {
      t_thread = r.next_thread++;
      fmt::format_to(std::back_inserter(line),
                     "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},"
                     "\"args\":{{\"name\":\"thread {}\"}}}},\n",
                     r.pid, t_thread, t_thread);
    }
    line += "{\"name\":";
    append_escaped(line, name);
    line += ",\"cat\":";
    append_escaped(line, category);
    line += R"(,"ph":")";
    line += phase;
    line += R"(","ts":)";
    append_fixed3(line, microseconds_since(r.origin, start));
    if (end != nullptr) {
      line += ",\"dur\":";
      append_fixed3(line, std::chrono::duration<double, std::micro>(*end - start).count());
    }
    if (phase == "i") line += R"(,"s":"t")";
    line += ",\"pid\":";
    append_integer(line, r.pid);
    line += ",\"tid\":";
    append_integer(line, t_thread);
    append_args(line, args);
    line += ",\n";
    if (std::fwrite(line.data(), 1, line.size(), r.file) != line.size()) {
      ++r.dropped;
      return;
    }
    ++r.events;
  } catch (...) {
    // Out of memory while formatting: the event is lost, the program goes on.
  }
}

// Opens the file and writes its head; the caller holds the recorder's mutex.
void open_locked(Recorder& r, const std::filesystem::path& path, bool call_sites) {
  std::FILE* const file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    throw Error(fmt::format("trace: cannot create '{}': {}", path.string(), std::strerror(errno)));
  }
  r.file = file;
  r.path = path;
  r.origin = Clock::now();
  r.events = 0;
  r.dropped = 0;
  r.pid = ::getpid();
  std::string program = "devmem";
  if (std::FILE* comm = std::fopen("/proc/self/comm", "r"); comm != nullptr) {
    char name[64] = {};
    if (std::fgets(name, sizeof name, comm) != nullptr) {
      program = std::string(name, strnlen(name, sizeof name));
      while (!program.empty() && program.back() == '\n') program.pop_back();
    }
    std::fclose(comm);
  }
  std::string head = "[\n{\"name\":\"process_name\",\"ph\":\"M\",";
  fmt::format_to(std::back_inserter(head), R"("pid":{},"tid":0,"args":{{"name":)", r.pid);
  append_escaped(head, program);
  head += "}},\n";
  std::fwrite(head.data(), 1, head.size(), file);
  g_call_sites.store(call_sites, std::memory_order_relaxed);
  g_active.store(true, std::memory_order_release);
}

// Writes the last event and the closing bracket; the caller holds the recorder's mutex. Returns
// an error message, empty when the file was completed.
std::string close_locked(Recorder& r) {
  if (r.file == nullptr) return {};
  g_active.store(false, std::memory_order_release);
  const std::string tail = fmt::format(
      "{{\"name\":\"trace end\",\"cat\":\"trace\",\"ph\":\"i\",\"s\":\"g\",\"ts\":{:.3f},"
      "\"pid\":{},\"tid\":0,\"args\":{{\"events\":{},\"dropped\":{}}}}}\n]\n",
      microseconds_since(r.origin, Clock::now()), r.pid, r.events, r.dropped);
  const bool written = std::fwrite(tail.data(), 1, tail.size(), r.file) == tail.size();
  const bool flushed = std::fflush(r.file) == 0;
  const bool closed = std::fclose(r.file) == 0;
  r.file = nullptr;
  if (written && flushed && closed && r.dropped == 0) return {};
  return fmt::format("trace: writing '{}' failed ({} event(s) lost): {}", r.path.string(),
                     r.dropped, std::strerror(errno));
}

void finish_at_exit() noexcept {
  Recorder& r = recorder();
  const std::unique_lock lock(r.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is writing at exit: leave the file open-ended
  const std::string error = close_locked(r);
  if (!error.empty()) std::fprintf(stderr, "devmem: warning: %s\n", error.c_str());
}

}  // namespace

bool call_sites() noexcept {
  return g_call_sites.load(std::memory_order_relaxed);
}

std::string call_site() noexcept {
  try {
    void* frames[48];
    const int count = ::backtrace(frames, 48);
    Dl_info own{};
    if (::dladdr(reinterpret_cast<void*>(&call_sites), &own) == 0) return {};
    // Two frames: the first outside devmem's libraries is often one of devmem's inline templates
    // (to_device<T> of memory.hpp), compiled into the caller; its caller is the user's line.
    std::string site;
    int found = 0;
    for (int i = 1; i < count && found < 2; ++i) {
      Dl_info info{};
      if (::dladdr(frames[i], &info) == 0 || info.dli_fname == nullptr) continue;
      const std::string_view path(info.dli_fname);
      const std::string_view object = path.substr(path.find_last_of('/') + 1);
      // libdevmem itself, and devmem's other libraries (libdevmem_mpi) that call into it.
      if (info.dli_fbase == own.dli_fbase || object.starts_with("libdevmem")) continue;
      // A return address: one byte back lands inside the call, which addr2line then names.
      const auto offset = reinterpret_cast<std::uintptr_t>(frames[i]) - 1 -
                          reinterpret_cast<std::uintptr_t>(info.dli_fbase);
      std::string function = "?";
      if (info.dli_sname != nullptr) {
        int status = 0;
        const std::unique_ptr<char, decltype(&std::free)> demangled(
            abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status), &std::free);
        function = status == 0 && demangled ? demangled.get() : info.dli_sname;
        if (function.size() > 160) function = function.substr(0, 157) + "...";
      }
      fmt::format_to(std::back_inserter(site), "{}{} ({}+0x{:x})", found == 0 ? "" : " from ",
                     function, object, offset);
      ++found;
    }
    return site;
  } catch (...) {
    // Out of memory while naming the site: the event goes without it.
  }
  return {};
}

void instant(std::string_view category, std::string_view name,
             std::initializer_list<Arg> args) noexcept {
  if (!active()) return;
  write_event(category, name, "i", Clock::now(), nullptr, args);
}

void complete(std::string_view category, std::string_view name, Clock::time_point start,
              std::initializer_list<Arg> args) noexcept {
  if (!active()) return;
  const Clock::time_point end = Clock::now();
  write_event(category, name, "X", start, &end, args);
}

void counter(std::string_view name, std::initializer_list<Arg> args) noexcept {
  if (!active()) return;
  write_event("counter", name, "C", Clock::now(), nullptr, args);
}

void device_memory(int device, std::int64_t in_use) noexcept {
  if (!active()) return;
  try {
    const std::string name = "device " + std::to_string(device) + " memory";
    write_event("counter", name, "C", Clock::now(), nullptr, {{"in use", in_use}});
  } catch (...) {
    // Out of memory for the name: the counter's sample is lost.
  }
}

void start_from_environment() noexcept {
  const char* const path = std::getenv("DEVMEM_TRACE");
  if (path == nullptr || *path == '\0') return;
  Recorder& r = recorder();
  const std::lock_guard lock(r.mutex);
  if (r.file != nullptr) return;
  const char* const sites_value = std::getenv("DEVMEM_TRACE_CALL_SITES");
  const std::string_view sites = sites_value != nullptr ? sites_value : "";
  if (!sites.empty() && sites != "0" && sites != "1") {
    std::fprintf(stderr,
                 "devmem: warning: DEVMEM_TRACE_CALL_SITES='%.*s' is neither 0 nor 1; call sites "
                 "are not recorded\n",
                 static_cast<int>(sites.size()), sites.data());
  }
  try {
    open_locked(r, path, sites == "1");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "devmem: warning: DEVMEM_TRACE: %s; no trace is written\n", e.what());
    return;
  }
  static_cast<void>(std::atexit(&finish_at_exit));
}

}  // namespace devmem::detail::trace

namespace devmem {

namespace trace = detail::trace;

TraceSession trace_to(const std::filesystem::path& path) {
  return trace_to(path, TraceOptions{});
}

TraceSession trace_to(const std::filesystem::path& path, const TraceOptions& options) {
  auto& r = trace::recorder();
  const std::lock_guard lock(r.mutex);
  if (r.file != nullptr) {
    throw InvalidArgument(
        fmt::format("trace_to('{}'): a trace is already being written to '{}' (DEVMEM_TRACE or "
                    "another TraceSession); stop it first",
                    path.string(), r.path.string()));
  }
  trace::open_locked(r, path, options.call_sites);
  return TraceSession(path);
}

bool tracing() noexcept {
  return trace::active();
}

TraceSession::TraceSession(TraceSession&& other) noexcept
    : path_(std::move(other.path_)), active_(std::exchange(other.active_, false)) {}

TraceSession& TraceSession::operator=(TraceSession&& other) noexcept {
  if (this != &other) {
    if (active_) {
      try {
        stop();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "devmem: warning: %s\n", e.what());
      }
    }
    path_ = std::move(other.path_);
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

TraceSession::~TraceSession() {
  if (!active_) return;
  try {
    stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "devmem: warning: %s\n", e.what());
  }
}

void TraceSession::stop() {
  if (!active_) return;
  active_ = false;
  auto& r = trace::recorder();
  std::string error;
  {
    const std::lock_guard lock(r.mutex);
    error = trace::close_locked(r);
  }
  if (!error.empty()) throw Error(error);
}

std::int64_t TraceSession::events() const noexcept {
  auto& r = trace::recorder();
  const std::lock_guard lock(r.mutex);
  return r.events;
}

}  // namespace devmem
