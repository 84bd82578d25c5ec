// summarize_trace: reads back a file that core/trace.cpp wrote. It reads devmem's own form only
// (one event per line, flat objects with one "args" object of numbers and strings), which is what
// lets it be this short; a file reformatted by another tool is refused with the line that differs.
#include <devmem/error.hpp>
#include <devmem/trace.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>

namespace devmem {

namespace {

using Value = std::variant<double, std::string>;

struct Event {
  std::map<std::string, Value, std::less<>> fields;
  std::map<std::string, Value, std::less<>> args;

  [[nodiscard]] std::string text(std::string_view key, bool in_args = false) const {
    const auto& from = in_args ? args : fields;
    const auto it = from.find(key);
    if (it == from.end()) return {};
    if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
    return {};
  }
  [[nodiscard]] double number(std::string_view key, bool in_args = false) const {
    const auto& from = in_args ? args : fields;
    const auto it = from.find(key);
    if (it == from.end()) return 0;
    if (const auto* d = std::get_if<double>(&it->second)) return *d;
    return 0;
  }
};

class LineParser {
 public:
  LineParser(std::string_view line, const std::string& where) : text_(line), where_(where) {}

  Event parse() {
    Event event;
    expect('{');
    parse_members(event.fields, &event.args);
    return event;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw Error(
        fmt::format("summarize_trace: {}: {} at column {} (devmem reads back only the "
                    "files it wrote, one event per line)",
                    where_, what, pos_ + 1));
  }
  void expect(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string parse_string() {
    expect('"');
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c == '\\') {
        if (pos_ >= text_.size()) fail("unfinished escape");
        c = text_[pos_++];
        if (c == 'n') {
          c = '\n';
        } else if (c == 't') {
          c = '\t';
        } else if (c == 'u') {
          if (pos_ + 4 > text_.size()) fail("unfinished \\u escape");
          c = static_cast<char>(
              std::strtol(std::string(text_.substr(pos_, 4)).c_str(), nullptr, 16));
          pos_ += 4;
        }
      }
      out.push_back(c);
    }
    expect('"');
    return out;
  }
  double parse_number() {
    double value = 0;
    const char* const begin = text_.data() + pos_;
    const auto [end, error] = std::from_chars(begin, text_.data() + text_.size(), value);
    if (error != std::errc{}) fail("expected a number or a string");
    pos_ += static_cast<std::size_t>(end - begin);
    return value;
  }
  using Members = std::map<std::string, Value, std::less<>>;
  void parse_members(Members& members, Members* nested) {
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return;
    }
    for (;;) {
      std::string key = parse_string();
      expect(':');
      if (pos_ < text_.size() && text_[pos_] == '{') {
        if (nested == nullptr || key != "args") fail("a nested object other than \"args\"");
        ++pos_;
        parse_members(*nested, nullptr);
      } else if (pos_ < text_.size() && text_[pos_] == '"') {
        members.emplace(std::move(key), parse_string());
      } else {
        members.emplace(std::move(key), parse_number());
      }
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return;
    }
  }

  std::string_view text_;
  const std::string& where_;
  std::size_t pos_ = 0;
};

void add_event(
    TraceSummary& summary, const Event& e, std::map<int, TraceSummary::DevicePeak>& peaks,
    std::map<std::tuple<std::string, std::string, std::string>, TraceSummary::Site>& sites,
    std::map<std::string, TraceSummary::Transfers>& transfers) {
  const std::string category = e.text("cat");
  const std::string name = e.text("name");
  const double ts = e.number("ts");
  if (category == "counter") {
    if (name.starts_with("device ") && name.ends_with(" memory")) {
      const int device = std::atoi(name.c_str() + 7);
      const auto bytes = static_cast<std::int64_t>(e.number("in use", true));
      auto& peak = peaks[device];
      peak.device = device;
      if (bytes > peak.peak_bytes) {
        peak.peak_bytes = bytes;
        peak.at_seconds = ts / 1e6;
      }
    }
  } else if (category == "alloc") {
    // Files written before call sites existed have no "site": the empty site, as when not asked.
    auto& site = sites[{e.text("operation", true), e.text("manager", true), e.text("site", true)}];
    site.operation = e.text("operation", true);
    site.manager = e.text("manager", true);
    site.call_site = e.text("site", true);
    ++site.count;
    site.bytes += static_cast<std::int64_t>(e.number("bytes", true));
  } else if (category == "copy") {
    auto& t = transfers[e.text("direction", true)];
    t.direction = e.text("direction", true);
    ++t.count;
    t.bytes += static_cast<std::int64_t>(e.number("bytes", true));
    t.seconds += e.number("dur") / 1e6;
  } else if (category == "sync") {
    ++summary.synchronizations;
    summary.synchronize_seconds += e.number("dur") / 1e6;
  } else if (category == "flush") {
    ++summary.flushes;
  } else if (category == "free") {
    summary.longest_deferred.push_back(TraceSummary::DeferredFree{
        e.text("address", true), static_cast<std::int64_t>(e.number("bytes", true)),
        e.number("deferred us", true) / 1e6});
    std::ranges::sort(summary.longest_deferred, std::greater<>{},
                      &TraceSummary::DeferredFree::deferred_seconds);
    if (summary.longest_deferred.size() > 5) summary.longest_deferred.pop_back();
  } else if (category == "pool") {
    (name == "hit" ? summary.pool_hits : summary.pool_misses) += 1;
  } else if (category == "launch") {
    ++summary.launches;
  }
}

}  // namespace

TraceSummary summarize_trace(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("summarize_trace: cannot open '{}'", path.string()));
  TraceSummary summary;
  std::map<int, TraceSummary::DevicePeak> peaks;
  std::map<std::tuple<std::string, std::string, std::string>, TraceSummary::Site> sites;
  std::map<std::string, TraceSummary::Transfers> transfers;
  double first = -1;
  double last = 0;
  std::string line;
  int number = 0;
  bool opened = false;
  while (std::getline(in, line)) {
    ++number;
    if (line == "[") {
      opened = true;
      continue;
    }
    if (line == "]" || line.empty()) continue;
    const std::string where = fmt::format("'{}' line {}", path.string(), number);
    if (!opened) {
      throw Error(
          fmt::format("summarize_trace: {}: not a trace devmem wrote (it starts with '[' "
                      "on a line of its own)",
                      where));
    }
    std::string_view body = line;
    if (body.ends_with(',')) body.remove_suffix(1);
    const Event event = LineParser(body, where).parse();
    if (event.text("ph") == "M" || event.text("cat") == "trace") continue;
    ++summary.events;
    const double ts = event.number("ts");
    if (first < 0 || ts < first) first = ts;
    last = std::max(last, ts + event.number("dur"));
    add_event(summary, event, peaks, sites, transfers);
  }
  if (!opened) {
    throw Error(
        fmt::format("summarize_trace: '{}' is empty or not a trace devmem wrote", path.string()));
  }
  summary.duration_seconds = first < 0 ? 0 : (last - first) / 1e6;
  for (const auto& [device, peak] : peaks) summary.peaks.push_back(peak);
  for (const auto& [key, site] : sites) summary.top_sites.push_back(site);
  std::ranges::sort(summary.top_sites, std::greater<>{}, &TraceSummary::Site::bytes);
  if (summary.top_sites.size() > 10) summary.top_sites.resize(10);
  for (const auto& [direction, t] : transfers) summary.transfers.push_back(t);
  return summary;
}

}  // namespace devmem
