#include "bench_options.hpp"

#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>

namespace devmem::app {

std::string_view to_string(Direction direction) noexcept {
  switch (direction) {
    case Direction::HostToDevice:
      return "h2d";
    case Direction::DeviceToHost:
      return "d2h";
    case Direction::DeviceToDevice:
      return "d2d";
  }
  return "?";
}

std::string_view to_string(HostMemory memory) noexcept {
  switch (memory) {
    case HostMemory::Pageable:
      return "pageable";
    case HostMemory::Pinned:
      return "pinned";
    case HostMemory::Mapped:
      return "mapped";
    case HostMemory::None:
      return "device";
  }
  return "?";
}

std::vector<std::int64_t> BenchOptions::sizes() const {
  std::vector<std::int64_t> out;
  for (std::int64_t s = min_size; s < max_size; s *= 4) out.push_back(s);
  out.push_back(max_size);
  return out;
}

std::int64_t parse_size(std::string_view option, std::string_view text) {
  std::int64_t bytes = 0;
  try {
    bytes = devmem::parse_byte_size(text);
  } catch (const devmem::InvalidArgument& e) {
    throw UsageError(fmt::format("{}: {}", option, e.what()));
  }
  if (bytes < 1 || bytes > kLargestSize) {
    throw UsageError(fmt::format("{}: '{}' is out of range (1 B to {})", option, text,
                                 devmem::format_bytes(kLargestSize)));
  }
  return bytes;
}

namespace {

int parse_repeats(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < 1 || value > 1000) {
    throw UsageError(fmt::format("--repeats: '{}' is not a whole number from 1 to 1000", text));
  }
  return value;
}

/// Splits "a,b,c" and maps each item through `parse`; duplicates are dropped, order is kept.
template <class T, class Parse>
std::vector<T> parse_list(std::string_view option, std::string_view text, Parse parse) {
  std::vector<T> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const std::optional<T> value = parse(item);
    if (!value) throw UsageError(fmt::format("{}: unknown item '{}'", option, item));
    if (std::find(out.begin(), out.end(), *value) == out.end()) out.push_back(*value);
    start = comma + 1;
  }
  return out;
}

std::optional<Direction> parse_direction(std::string_view item) {
  for (const Direction d :
       {Direction::HostToDevice, Direction::DeviceToHost, Direction::DeviceToDevice}) {
    if (item == to_string(d)) return d;
  }
  return std::nullopt;
}

std::optional<HostMemory> parse_memory(std::string_view item) {
  for (const HostMemory m : {HostMemory::Pageable, HostMemory::Pinned, HostMemory::Mapped}) {
    if (item == to_string(m)) return m;
  }
  return std::nullopt;
}

}  // namespace

namespace {

/// What the command line set, before the defaults that depend on --quick are applied.
struct ParsedArguments {
  BenchOptions options;
  std::optional<std::int64_t> min_size;
  std::optional<std::int64_t> max_size;
  std::optional<int> repeats;
  bool only_kernels = false;
};

constexpr std::array<std::string_view, 7> kFlags{
    "--help", "-h", "--quick", "--no-alloc", "--kernels", "--no-kernels", "--no-progress"};
constexpr std::array<std::string_view, 5> kValued{"--min-size", "--max-size", "--repeats",
                                                  "--kinds", "--memory"};

bool contains(std::span<const std::string_view> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// One of kFlags.
void apply_flag(std::string_view name, ParsedArguments& parsed) {
  BenchOptions& options = parsed.options;
  if (name == "--help" || name == "-h") {
    options.help = true;
  } else if (name == "--quick") {
    options.quick = true;
  } else if (name == "--no-alloc") {
    options.measure_alloc = false;
  } else if (name == "--kernels") {
    parsed.only_kernels = true;
  } else if (name == "--no-kernels") {
    options.measure_kernels = false;
  } else if (name == "--no-progress") {
    options.progress = false;
  }
}

/// One of kValued, with its value.
void apply_valued(std::string_view name, std::string_view value, ParsedArguments& parsed) {
  if (name == "--min-size") {
    parsed.min_size = parse_size(name, value);
  } else if (name == "--max-size") {
    parsed.max_size = parse_size(name, value);
  } else if (name == "--repeats") {
    parsed.repeats = parse_repeats(value);
  } else if (name == "--kinds") {
    parsed.options.directions = parse_list<Direction>(name, value, parse_direction);
  } else if (name == "--memory") {
    parsed.options.memories = parse_list<HostMemory>(name, value, parse_memory);
  }
}

/// The combinations no run can satisfy, and the defaults that depend on --quick.
BenchOptions finish(ParsedArguments parsed) {
  BenchOptions options = std::move(parsed.options);
  if (parsed.only_kernels && !options.measure_kernels) {
    throw UsageError("--kernels and --no-kernels leave nothing to measure");
  }
  if (parsed.only_kernels) options.measure_transfers = false;
  if (options.json.enabled && options.csv.enabled && options.json.path.empty() &&
      options.csv.path.empty()) {
    throw UsageError("--json and --csv both want stdout: give one of them a file (--csv=FILE)");
  }
  // --quick: a shorter sweep (and fewer copies per sample); explicit options still win.
  options.min_size = parsed.min_size.value_or(4);
  options.max_size =
      parsed.max_size.value_or(options.quick ? std::int64_t{64} << 20 : std::int64_t{1} << 30);
  options.repeats = parsed.repeats.value_or(5);
  if (options.min_size > options.max_size) {
    throw UsageError(fmt::format("--min-size ({} bytes) is larger than --max-size ({} bytes)",
                                 options.min_size, options.max_size));
  }
  return options;
}

}  // namespace

namespace {

/// --json or --csv, with an optional "=FILE".
void apply_output(std::string_view name, std::optional<std::string_view> file,
                  ParsedArguments& parsed) {
  OutputTarget& target = name == "--json" ? parsed.options.json : parsed.options.csv;
  target.enabled = true;
  if (file) {
    if (file->empty()) throw UsageError(fmt::format("{}=: empty file name", name));
    target.path = std::string(*file);
  }
}

/// Applies args[i] (and its value, advancing i past it when it is the next argument).
void apply_argument(std::span<const std::string_view> args, std::size_t& i,
                    ParsedArguments& parsed) {
  std::string_view arg = args[i];
  // "--name=value" and "--name value" are both accepted for options that take a value.
  std::optional<std::string_view> inline_value;
  if (const std::size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
    inline_value = arg.substr(eq + 1);
    arg = arg.substr(0, eq);
  }
  if (arg == "--json" || arg == "--csv") {
    apply_output(arg, inline_value, parsed);
  } else if (contains(kFlags, arg)) {
    if (inline_value) throw UsageError(fmt::format("{} takes no value", arg));
    apply_flag(arg, parsed);
  } else if (contains(kValued, arg)) {
    if (!inline_value && i + 1 >= args.size()) {
      throw UsageError(fmt::format("{}: missing value", arg));
    }
    apply_valued(arg, inline_value ? *inline_value : args[++i], parsed);
  } else {
    throw UsageError(fmt::format("unknown option '{}'", args[i]));
  }
}

}  // namespace

BenchOptions parse_bench_options(std::span<const std::string_view> args) {
  ParsedArguments parsed;
  for (std::size_t i = 0; i < args.size(); ++i) apply_argument(args, i, parsed);
  return finish(std::move(parsed));
}

std::string bench_usage() {
  return "usage: devmem bench [options]\n"
         "Transfer bandwidth (H2D, D2H, D2D from pageable, pinned and mapped host memory) over a\n"
         "size sweep, allocation latency (direct vs pool) and per-copy enqueue cost, each next to\n"
         "the raw vendor call measured in the same run (cudaMemcpyAsync / hipMemcpyAsync; on the\n"
         "host backend single-thread memcpy), with the ratio devmem / raw. Each number is the\n"
         "median of the repeats after a warm-up; device work is timed with events.\n"
         "On the host backend also kernels (saxpy, a shared-memory block reduction, a tiled\n"
         "matrix multiply, a transpose) run by its simulator against the same computation as a\n"
         "plain C++ loop: time per launch, simulated threads/s, times slower than the loop.\n"
         "options:\n"
         "  --quick             4 B .. 64 MiB, fewer copies per sample: seconds on the host "
         "backend\n"
         "  --min-size SIZE     smallest transfer (default 4); SIZE is bytes with K, M or G\n"
         "  --max-size SIZE     largest transfer (default 1G, --quick 64M); sizes step x4\n"
         "  --repeats N         timed repeats per measurement (default 5)\n"
         "  --kinds LIST        directions: h2d,d2h,d2d (default all)\n"
         "  --memory LIST       host memory: pageable,pinned,mapped (default all)\n"
         "  --no-alloc          skip the allocation and enqueue measurements\n"
         "  --kernels           only the kernel group (no transfers, no allocation)\n"
         "  --no-kernels        skip the kernel group\n"
         "  --json[=FILE]       JSON to stdout instead of the table, or to FILE besides it\n"
         "  --csv[=FILE]        CSV to stdout instead of the table, or to FILE besides it\n"
         "  --no-progress       no progress bar (it is drawn on stderr only when a terminal)\n"
         "  --help              this text\n"
         "exit codes: 0 done, 1 no device or a runtime error, 2 usage error\n";
}

}  // namespace devmem::app
