// The exceptions devmem throws. Every error is a devmem::Error, which is a std::runtime_error, and
// every message names the operation and the offending values, e.g.
//   "reshape: cannot reshape array of size 1000 into shape (3, 7)".
#pragma once

#include <devmem/export.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace devmem {

/// Base of every exception devmem throws.
class DEVMEM_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  ~Error() override;
};

/// A caller error: bad shape, strides, order, dtype, section, size mismatch, non-contiguous data
/// where contiguity is required, memory misaligned for a typed access, an object from another
/// context, a scope used twice.
class DEVMEM_API InvalidArgument : public Error {
 public:
  using Error::Error;
  ~InvalidArgument() override;
};

/// An allocation failed even after pending deallocations were flushed and the allocation retried.
class DEVMEM_API OutOfMemory : public Error {
 public:
  /// `message` names the operation, the size and the device's free/total memory.
  OutOfMemory(const std::string& message, std::int64_t requested_bytes);
  ~OutOfMemory() override;
  /// The size of the allocation that failed.
  [[nodiscard]] std::int64_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  std::int64_t requested_bytes_;
};

/// Whether a vendor error leaves the device usable. Sticky errors (CUDA's and HIP's illegal
/// address, launch failure, misaligned address, device-side assert, uncorrectable ECC, launch
/// time-out, ...) corrupt the process's device context: every later call fails with the same
/// error until the process ends.
enum class ErrorPersistence {
  Recoverable,  ///< the call failed; the device works on
  Sticky,       ///< the device is lost to this process: restart it
};

/// A vendor call failed. Carries the backend ("host", "cuda", "roc"), the function that failed, the
/// vendor's numeric error code and its name (e.g. "cudaErrorInvalidValue"), and whether the error
/// is sticky.
class DEVMEM_API BackendError : public Error {
 public:
  /// `message` is what what() returns; the other values are kept for programs to inspect.
  BackendError(std::string backend, std::string function, int code, std::string code_name,
               const std::string& message,
               ErrorPersistence persistence = ErrorPersistence::Recoverable);
  ~BackendError() override;
  /// "host", "cuda" or "roc".
  [[nodiscard]] const std::string& backend() const noexcept { return backend_; }
  /// The vendor function that failed, e.g. "cudaMemcpyAsync".
  [[nodiscard]] const std::string& function() const noexcept { return function_; }
  /// The vendor's numeric error code (cudaError_t, hipError_t, hsa_status_t, the host Status).
  [[nodiscard]] int code() const noexcept { return code_; }
  /// The code's name, e.g. "cudaErrorInvalidValue" (the host backend: "InvalidValue").
  [[nodiscard]] const std::string& code_name() const noexcept { return code_name_; }
  /// Whether the error is sticky (ErrorPersistence): after one, the GPU backends fail every later
  /// call fast with this same error and release nothing.
  [[nodiscard]] ErrorPersistence persistence() const noexcept { return persistence_; }
  [[nodiscard]] bool sticky() const noexcept { return persistence_ == ErrorPersistence::Sticky; }

 private:
  std::string backend_;
  std::string function_;
  int code_;
  std::string code_name_;
  ErrorPersistence persistence_;
};

/// The selected backend has no usable device (or the requested device index does not exist).
class DEVMEM_API NoDevice : public Error {
 public:
  using Error::Error;
  ~NoDevice() override;
};

}  // namespace devmem
