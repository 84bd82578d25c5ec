// The pieces of the IPC handle's byte format (docs/scaling-out.md#ipc) that core/ipc.cpp and
// core/ipc_dtype.cpp share: the byte writer and the bounds-checked reader, and the dtype
// description's encoding and checks.
#pragma once

#include "core/format.hpp"

#include <devmem/dtype.hpp>
#include <devmem/ipc.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace devmem::detail::ipc {

/// The longest string a handle holds: its length is one byte.
inline constexpr std::size_t kMaxStringBytes = 255;

class Writer {
 public:
  Writer() { bytes_.reserve(kTypicalHandleBytes); }
  template <class T>
  void put(T value) {
    append(&value, sizeof value);
  }
  /// Callers check the length first (kMaxStringBytes): one byte holds it.
  void put_string(std::string_view text) {
    put(static_cast<std::uint8_t>(text.size()));
    append(text.data(), text.size());
  }
  void put_bytes(std::span<const std::byte> bytes) { append(bytes.data(), bytes.size()); }
  std::vector<std::byte>& bytes() noexcept { return bytes_; }

 private:
  // A handle without a dtype description is a few hundred bytes.
  static constexpr std::size_t kTypicalHandleBytes = 512;
  // resize and memcpy rather than vector::insert of a byte range: g++ 12 at -O3 reports a false
  // -Wstringop-overflow for the inlined insert into an empty vector.
  void append(const void* data, std::size_t size) {
    if (size == 0) return;
    const std::size_t at = bytes_.size();
    bytes_.resize(at + size);
    std::memcpy(bytes_.data() + at, data, size);
  }
  std::vector<std::byte> bytes_;
};

/// Reads fields in order; InvalidArgument (IpcHandle::from_bytes) for one that runs past the end.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T value{};
    std::memcpy(&value, bytes_.data() + at_, sizeof value);
    at_ += sizeof value;
    return value;
  }
  std::string get_string(const char* what) {
    const auto length = get<std::uint8_t>(what);
    need(length, what);
    std::string text(reinterpret_cast<const char*>(bytes_.data() + at_), length);
    at_ += length;
    return text;
  }
  void get_bytes(std::span<std::byte> out, const char* what) {
    need(out.size(), what);
    std::memcpy(out.data(), bytes_.data() + at_, out.size());
    at_ += out.size();
  }
  [[nodiscard]] std::size_t position() const noexcept { return at_; }

 private:
  void need(std::size_t count, const char* what) const {
    if (bytes_.size() - at_ < count) {
      throw_invalid("IpcHandle::from_bytes",
                    "the handle is malformed: its {} runs past its end at byte {} of {}", what, at_,
                    bytes_.size());
    }
  }
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

/// Writes the description's fields (the typestr, itemsize and alignment are written with the
/// DType): count, then each field's name, offset, typestr, sub-array shape and nested fields.
void put_fields(Writer& writer, const std::vector<DTypeField>& fields);
/// Reads what put_fields wrote. Bounds only: check_description checks the values.
[[nodiscard]] std::vector<DTypeField> get_fields(Reader& reader);

/// InvalidArgument, "<operation>: the dtype description ...", unless `description` describes
/// `dtype` (the rules are ipc_handle(array, description)'s in ipc.hpp).
void check_description(const DTypeDescription& description, const DType& dtype,
                       const char* operation);

}  // namespace devmem::detail::ipc
