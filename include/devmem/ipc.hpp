// Sharing device arrays between processes of one machine (Numba's DeviceNDArray.get_ipc_handle(),
// IpcArrayHandle.open()/close() and cuda.open_ipc_array). docs/scaling-out.md#ipc has the rules,
// the byte format and the per-backend mechanism.
//
// - Exporting: ipc_handle(array) (or array.ipc_handle()) names the allocation the array lies in,
//   the array's offset inside it, its shape, byte strides and dtype, the device and the backend.
//   The handle keeps that memory alive in the exporting process for as long as it (or a copy)
//   exists, even when every array viewing it is gone. Exporting does not synchronise: make the
//   writes an importer should see complete (Stream::synchronize) before telling it.
// - Passing it on: to_bytes() / from_bytes() (or to_hex() / from_hex(), for a command line) give
//   plain bytes, with a format version and a checksum. The checksum finds accidents, not forgery:
//   every field is checked again when the handle is opened.
// - The element type: DType (kind, itemsize, alignment) plus a DTypeDescription, NumPy's full
//   description (structured fields with offsets, byte order, datetime units), which DType does not
//   hold. ipc_handle(array) describes the DType alone; ipc_handle(array, description) carries the
//   caller's (the Python layer passes its NumPy dtype's), and the importer reads it back with
//   IpcHandle::dtype_description() to rebuild the exporter's dtype.
// - Importing: open_ipc_array(handle) in another process gives a DeviceArray over the same memory:
//   writes on either side are seen by the other once the writer has synchronised. The memory is
//   mapped once per process and handle; it is unmapped exactly once, when the last array over it
//   is gone. IpcHandle::open()/close() are Numba's explicit form: open() twice without a close(),
//   and close() without an open(), are InvalidArgument (Numba's "IpcHandle is already opened" /
//   "IpcHandle not opened"); close() gives up the handle's own reference, so arrays still viewing
//   the memory stay valid (devmem never leaves a dangling array; Numba says the array must not be
//   used after close()).
// - Opening a handle in the process that exported it is InvalidArgument on every backend (Numba:
//   "opening IpcHandle from original process"; CUDA refuses it): use the exported array itself.
//
// Errors: InvalidArgument for bytes that are not a handle (wrong magic, truncated, trailing bytes,
// corrupt: checksum mismatch), another format version (a version 1 handle included: it is refused,
// not converted, naming both versions), a dtype description that does not fit the dtype, a handle
// of another backend, a device that does not exist, a layout that does not fit the allocation, an
// allocation size larger than what opening really mapped (the driver's address range, the host
// memfd's size: the mapping is closed again, naming both sizes), a host handle whose descriptor is
// not the exporter's memfd (refused before it is opened), and on backends without IPC
// (supports_ipc is false: the ROC and CUDA backends on HIP-CPU, the strict fake). BackendError
// when the vendor refuses: the exporter has freed the allocation or exited (the host backend
// reports which).
// Thread safety: all functions may be called from several threads at once; an IpcHandle and its
// copies share one state (open/closed), guarded by a mutex.
#pragma once

#include <devmem/device_array.hpp>
#include <devmem/dtype.hpp>
#include <devmem/export.hpp>
#include <devmem/layout.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace devmem {

/// One field of a structured element type, as NumPy's dtype.fields has it.
struct DTypeField {
  /// The field's name (NumPy's names: not empty, unique within its structure).
  std::string name;
  /// Byte offset from the start of the enclosing element (or enclosing field, when nested).
  std::int64_t offset = 0;
  /// The field's element as an array-interface typestr, byte order and datetime unit included:
  /// "<f8", ">i4", "|b1", "<M8[ns]", "<m8[10ms]", "|S5", "<U3" (3 characters, 12 bytes), "|V12".
  std::string typestr;
  /// Sub-array shape (NumPy's ('<f4', (2, 3))); empty for one value.
  Shape shape;
  /// For a nested structure (typestr "|V<n>"): its fields, offsets relative to this field.
  std::vector<DTypeField> fields;

  friend bool operator==(const DTypeField&, const DTypeField&) = default;
};

/// An element type as NumPy describes it: what an IPC handle carries so that the importing process
/// rebuilds the exporter's NumPy dtype exactly (DType has no field names, byte order or datetime
/// units: a structured dtype is only "|V12" there, ">f8" is "f8" and "<M8[ns]" is "|V8").
/// Rebuilding in NumPy: np.dtype({"names": [...], "formats": [typestr, or (typestr, shape), or the
/// nested structure], "offsets": [...], "itemsize": itemsize}, align=alignment > 1) for a
/// structure, np.dtype(typestr) otherwise.
struct DEVMEM_API DTypeDescription {
  /// The whole element's typestr: "|V<itemsize>" for a structure.
  std::string typestr;
  /// Bytes per element and the element's alignment: those of the array's DType.
  std::int64_t itemsize = 0;
  std::int64_t alignment = 1;
  /// A structure's fields in NumPy's order; empty for any other dtype.
  std::vector<DTypeField> fields;

  /// What `dtype` alone says (no fields, its typestr).
  [[nodiscard]] static DTypeDescription of(const DType& dtype);

  friend bool operator==(const DTypeDescription&, const DTypeDescription&) = default;
};

class IpcHandle;
// Declared before the class so that they are exported: a friend declaration cannot carry
// DEVMEM_API. Documented below the class.
DEVMEM_API IpcHandle ipc_handle(const DeviceArray& array);
DEVMEM_API IpcHandle ipc_handle(const DeviceArray& array, DTypeDescription description);
DEVMEM_API DeviceArray open_ipc_array(const IpcHandle& handle, std::optional<int> device);

/// A device array exported for other processes (Numba's IpcArrayHandle). Copies share one state.
class DEVMEM_API IpcHandle {
 public:
  /// The version of the byte format to_bytes() writes and from_bytes() reads (the only one it
  /// reads: version 1, without the dtype description, is refused naming both versions).
  static constexpr std::uint32_t kFormatVersion = 2;
  /// Bytes of the vendor's own handle inside (cudaIpcMemHandle_t, hipIpcMemHandle_t).
  static constexpr std::size_t kVendorHandleBytes = 64;

  /// The handle as bytes (docs/scaling-out.md#ipc has the format).
  [[nodiscard]] std::vector<std::byte> to_bytes() const;
  /// Reads what to_bytes() wrote (in any process). InvalidArgument for anything else, naming
  /// what is wrong: not a handle, truncated, trailing bytes, another version, corrupt.
  [[nodiscard]] static IpcHandle from_bytes(std::span<const std::byte> bytes);
  /// to_bytes() as lowercase hexadecimal digits.
  [[nodiscard]] std::string to_hex() const;
  /// Reads to_hex()'s text; InvalidArgument for an odd length or a character that is not a
  /// hexadecimal digit, then as from_bytes.
  [[nodiscard]] static IpcHandle from_hex(std::string_view hex);

  /// The exporting backend ("host", "cuda", "roc").
  [[nodiscard]] const std::string& backend() const noexcept;
  /// The exporting device.
  [[nodiscard]] int device() const noexcept;
  /// The array's shape, byte strides and dtype.
  [[nodiscard]] const Shape& shape() const noexcept;
  [[nodiscard]] const Strides& strides() const noexcept;
  [[nodiscard]] const DType& dtype() const noexcept;
  /// The element type as the exporter described it (DTypeDescription::of(dtype()) unless it was
  /// exported with a description). Checked against dtype() when read: same itemsize and alignment,
  /// fields inside the element.
  [[nodiscard]] const DTypeDescription& dtype_description() const noexcept;
  /// Byte offset of element (0, ..., 0) from the start of the allocation.
  [[nodiscard]] std::int64_t offset() const noexcept;
  /// Bytes of the allocation the handle names, as the exporter wrote them: opening checks them
  /// against what is really mapped.
  [[nodiscard]] std::int64_t allocation_bytes() const noexcept;
  /// The exporting process.
  [[nodiscard]] std::int64_t exporter_pid() const noexcept;
  /// The vendor's handle of the allocation.
  [[nodiscard]] const std::array<std::byte, kVendorHandleBytes>& vendor_handle() const noexcept;
  /// True in the process that exported the memory (for a handle made by ipc_handle() and for one
  /// read back with from_bytes() there).
  [[nodiscard]] bool is_exporter() const noexcept;
  /// True between open() and close().
  [[nodiscard]] bool is_open() const;

  /// Numba's IpcArrayHandle.open(): the array in this process, on device `device` (default: the
  /// handle's device). InvalidArgument when already open, in the exporting process, or as
  /// open_ipc_array.
  [[nodiscard]] DeviceArray open(std::optional<int> device = std::nullopt);
  /// Numba's IpcArrayHandle.close(): gives up the reference open() took. InvalidArgument when
  /// not open (a second close() included).
  void close();

  /// The shared state (opaque; core/ipc.cpp defines it).
  struct State;

 private:
  friend IpcHandle ipc_handle(const DeviceArray& array);
  friend IpcHandle ipc_handle(const DeviceArray& array, DTypeDescription description);
  friend DeviceArray open_ipc_array(const IpcHandle& handle, std::optional<int> device);
  explicit IpcHandle(std::shared_ptr<State> state) noexcept;
  std::shared_ptr<State> state_;
};

/// Exports `array` (Numba's get_ipc_handle()): InvalidArgument for an array without device
/// memory (size 0, a view of mapped host memory), on a backend or device without IPC; the
/// backend's errors for memory it did not allocate.
[[nodiscard]] DEVMEM_API IpcHandle ipc_handle(const DeviceArray& array);
/// The same, carrying `description` as the element type (the Python layer's NumPy dtype).
/// InvalidArgument naming what is wrong when it does not describe the array's dtype: another
/// itemsize or alignment, another kind for a bool/integer/float/complex DType, fields for a DType
/// that is not a record, a malformed typestr or unit, an object ('O') field, a field outside its
/// element, a repeated or empty field name, a string longer than 255 bytes.
[[nodiscard]] DEVMEM_API IpcHandle ipc_handle(const DeviceArray& array,
                                              DTypeDescription description);

/// The exported array in this process (Numba's cuda.open_ipc_array, the RAII way: the mapping
/// lasts as long as the array or a view of it). On device `device`, default the handle's.
[[nodiscard]] DEVMEM_API DeviceArray open_ipc_array(const IpcHandle& handle,
                                                    std::optional<int> device = std::nullopt);
/// The same from the handle's bytes (IpcHandle::from_bytes).
[[nodiscard]] DEVMEM_API DeviceArray open_ipc_array(std::span<const std::byte> bytes,
                                                    std::optional<int> device = std::nullopt);

/// Whether the active backend can share device `device`'s memory with other processes
/// (Backend::supports_ipc). False for a device that does not exist.
[[nodiscard]] DEVMEM_API bool ipc_supported(int device = 0);

}  // namespace devmem
