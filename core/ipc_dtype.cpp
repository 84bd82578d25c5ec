// The dtype description an IPC handle carries (DTypeDescription in include/devmem/ipc.hpp): its
// encoding in the handle and its checks. It arrives from another process, so nothing in it is
// trusted: every typestr is parsed, every field must lie inside its element, and nesting and the
// number of fields are bounded before anything recursive or large is done with them.
#include "core/ipc_format.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <set>

namespace devmem {

DTypeDescription DTypeDescription::of(const DType& dtype) {
  return DTypeDescription{dtype.typestr(), dtype.itemsize(), dtype.alignment(), {}};
}

namespace detail::ipc {
namespace {

// Deeper than any real structure; bounds the recursion on a forged handle.
constexpr int kMaxFieldDepth = 16;
// Fields of all levels together: bounds the work and memory a forged handle can cause.
constexpr std::size_t kMaxFields = 4096;
// NumPy's limit on a sub-array's axes.
constexpr std::uint32_t kMaxSubarrayAxes = 64;

void read_fields(Reader& reader, std::vector<DTypeField>& out, int depth, std::size_t& total) {
  const auto count = reader.get<std::uint32_t>("dtype field count");
  if (count > kMaxFields - std::min(total, kMaxFields)) {
    throw_invalid("IpcHandle::from_bytes", "the handle's dtype has more than {} fields",
                  kMaxFields);
  }
  total += count;
  for (std::uint32_t i = 0; i < count; ++i) {
    DTypeField& field = out.emplace_back();
    field.name = reader.get_string("dtype field name");
    field.offset = reader.get<std::int64_t>("dtype field offset");
    field.typestr = reader.get_string("dtype field typestr");
    const auto ndim = reader.get<std::uint32_t>("dtype field shape");
    if (ndim > kMaxSubarrayAxes) {
      throw_invalid("IpcHandle::from_bytes",
                    "the handle's dtype field '{}' has a sub-array of {} axes (at most {})",
                    field.name, ndim, kMaxSubarrayAxes);
    }
    field.shape.resize(ndim);
    for (std::int64_t& n : field.shape) n = reader.get<std::int64_t>("dtype field shape");
    if (depth >= kMaxFieldDepth) {
      // Only an empty list of fields may follow at the deepest level.
      if (reader.get<std::uint32_t>("dtype field count") != 0) {
        throw_invalid("IpcHandle::from_bytes",
                      "the handle's dtype nests structures more than {} deep", kMaxFieldDepth);
      }
      continue;
    }
    read_fields(reader, field.fields, depth + 1, total);
  }
}

/// A typestr taken apart: "<M8[10ms]" is order '<', kind 'M', 8 bytes.
struct Typestr {
  char kind = 0;
  std::int64_t bytes = 0;
};

bool is_datetime_unit(std::string_view unit) {
  static constexpr std::array<std::string_view, 13> kUnits{"Y",  "M",  "W",  "D",  "h",  "m", "s",
                                                           "ms", "us", "ns", "ps", "fs", "as"};
  return std::find(kUnits.begin(), kUnits.end(), unit) != kUnits.end();
}

bool valid_size(char kind, std::int64_t count) {
  switch (kind) {
    case 'b':
      return count == 1;
    case 'i':
    case 'u':
      return count == 1 || count == 2 || count == 4 || count == 8;
    case 'f':  // 10, 12, 16: long double as NumPy names it on the platforms it runs on
      return count == 2 || count == 4 || count == 8 || count == 10 || count == 12 || count == 16;
    case 'c':
      return count == 8 || count == 16 || count == 20 || count == 24 || count == 32;
    case 'm':
    case 'M':
      return count == 8;
    default:  // 'S', 'U', 'V': any positive length
      return true;
  }
}

/// The decimal number `text` starts with, removed from it; 0 when there is none, -1 on overflow.
std::int64_t take_count(std::string_view& text) {
  std::int64_t count = 0;
  while (!text.empty() && text.front() >= '0' && text.front() <= '9') {
    if (count > (std::numeric_limits<std::int64_t>::max() - 9) / 10) return -1;
    count = count * 10 + (text.front() - '0');
    text.remove_prefix(1);
  }
  return count;
}

/// What may follow a datetime's size: "[ns]", "[10ms]", or nothing (a generic datetime).
bool valid_datetime_suffix(std::string_view rest) {
  if (rest.empty()) return true;
  if (rest.size() < 3 || rest.front() != '[' || rest.back() != ']') return false;
  std::string_view unit = rest.substr(1, rest.size() - 2);
  static_cast<void>(take_count(unit));  // the optional multiplier
  return is_datetime_unit(unit);
}

/// `typestr` parsed; InvalidArgument naming `where` and what is wrong otherwise.
Typestr parse_typestr(std::string_view typestr, std::string_view where, const char* op) {
  const auto refuse = [&](std::string_view why) {
    throw_invalid(op, "the dtype description's typestr '{}' ({}) {}", typestr, where, why);
  };
  if (typestr.size() > kMaxStringBytes) refuse("is longer than 255 bytes");
  if (typestr.size() < 3 || std::string_view("<>|=").find(typestr[0]) == std::string_view::npos) {
    refuse("is not a typestr (a byte order '<', '>', '|' or '=', a kind and a size)");
  }
  Typestr out;
  out.kind = typestr[1];
  if (out.kind == 'O') refuse("holds Python objects, which cannot be shared between processes");
  if (std::string_view("biufcmMSUV").find(out.kind) == std::string_view::npos) {
    refuse("has an unknown kind");
  }
  std::string_view rest = typestr.substr(2);
  const std::int64_t count = take_count(rest);
  if (count <= 0) refuse("has no positive size, or too large a one");
  if (!valid_size(out.kind, count)) refuse("has a size its kind does not have");
  if (out.kind == 'm' || out.kind == 'M') {
    if (!valid_datetime_suffix(rest)) refuse("has an unknown datetime unit");
  } else if (!rest.empty()) {
    refuse("has characters after its size");
  }
  if (out.kind == 'U' && count > std::numeric_limits<std::int64_t>::max() / 4) {
    refuse("has too large a size");
  }
  out.bytes = out.kind == 'U' ? count * 4 : count;  // NumPy counts 'U' in 4-byte characters
  return out;
}

void check_name(const DTypeField& field, std::size_t index, const std::string& path,
                const char* op) {
  if (field.name.empty()) {
    throw_invalid(op, "the dtype description's field {} of {} has no name", index,
                  path.empty() ? std::string("the element") : "'" + path + "'");
  }
  if (field.name.size() > kMaxStringBytes) {
    throw_invalid(op, "the dtype description's field name '{}...' is longer than 255 bytes",
                  field.name.substr(0, 32));
  }
}

/// Bytes of the field: its element's times its sub-array shape's.
std::int64_t field_bytes(const DTypeField& field, const Typestr& element, const std::string& where,
                         const char* op) {
  std::int64_t bytes = element.bytes;
  for (const std::int64_t n : field.shape) {
    if (n < 0 || (n > 0 && bytes > std::numeric_limits<std::int64_t>::max() / n)) {
      throw_invalid(op, "the dtype description's field '{}' has a bad sub-array shape ({})", where,
                    n);
    }
    bytes *= n;
  }
  return bytes;
}

void check_fields(const std::vector<DTypeField>& fields, std::int64_t container,
                  const std::string& path, int depth, std::size_t& total, const char* op) {
  if (depth > kMaxFieldDepth) {
    throw_invalid(op, "the dtype description nests structures more than {} deep", kMaxFieldDepth);
  }
  total += fields.size();
  if (total > kMaxFields) {
    throw_invalid(op, "the dtype description has more than {} fields", kMaxFields);
  }
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const DTypeField& field = fields[i];
    const std::string where = path.empty() ? field.name : path + "." + field.name;
    check_name(field, i, path, op);
    if (!names.insert(field.name).second) {
      throw_invalid(op, "the dtype description names field '{}' twice", where);
    }
    const Typestr element = parse_typestr(field.typestr, "field '" + where + "'", op);
    const std::int64_t bytes = field_bytes(field, element, where, op);
    if (field.offset < 0 || bytes > container || field.offset > container - bytes) {
      throw_invalid(op,
                    "the dtype description's field '{}' ({} bytes at offset {}) does not lie "
                    "inside its {}-byte element",
                    where, bytes, field.offset, container);
    }
    if (!field.fields.empty()) {
      if (element.kind != 'V') {
        throw_invalid(op, "the dtype description's field '{}' has fields but typestr '{}'", where,
                      field.typestr);
      }
      check_fields(field.fields, element.bytes, where, depth + 1, total, op);
    }
  }
}

}  // namespace

void put_fields(Writer& writer, const std::vector<DTypeField>& fields) {
  writer.put(static_cast<std::uint32_t>(fields.size()));
  for (const DTypeField& field : fields) {
    writer.put_string(field.name);
    writer.put(field.offset);
    writer.put_string(field.typestr);
    writer.put(static_cast<std::uint32_t>(field.shape.size()));
    for (const std::int64_t n : field.shape) writer.put(n);
    put_fields(writer, field.fields);
  }
}

std::vector<DTypeField> get_fields(Reader& reader) {
  std::vector<DTypeField> fields;
  std::size_t total = 0;
  read_fields(reader, fields, 1, total);
  return fields;
}

void check_description(const DTypeDescription& description, const DType& dtype, const char* op) {
  if (description.itemsize != dtype.itemsize() || description.alignment != dtype.alignment()) {
    throw_invalid(op,
                  "the dtype description ('{}', itemsize {}, alignment {}) does not describe dtype "
                  "{} (itemsize {}, alignment {})",
                  description.typestr, description.itemsize, description.alignment, dtype.name(),
                  dtype.itemsize(), dtype.alignment());
  }
  const Typestr whole = parse_typestr(description.typestr, "the whole element", op);
  if (whole.bytes != dtype.itemsize()) {
    throw_invalid(op, "the dtype description's typestr '{}' is not {} bytes, dtype {}'s itemsize",
                  description.typestr, dtype.itemsize(), dtype.name());
  }
  if (!dtype.is_record() && (whole.kind != dtype.kind() || !description.fields.empty())) {
    throw_invalid(op,
                  "the dtype description '{}'{} does not describe dtype {} (only a record dtype "
                  "may be described as another kind or a structure)",
                  description.typestr, description.fields.empty() ? "" : " with fields",
                  dtype.name());
  }
  if (!description.fields.empty() && whole.kind != 'V') {
    throw_invalid(op, "the dtype description has fields but typestr '{}' (a structure is '|V{}')",
                  description.typestr, dtype.itemsize());
  }
  std::size_t total = 0;
  check_fields(description.fields, dtype.itemsize(), "", 1, total, op);
}

}  // namespace detail::ipc
}  // namespace devmem
