// Out-of-line members of the exception classes: defining the destructors here anchors each class's
// vtable and type_info in libdevmem, so exceptions thrown by the library are caught by type in
// programs built with hidden visibility too.
#include <devmem/error.hpp>

#include <utility>

namespace devmem {

Error::~Error() = default;

InvalidArgument::~InvalidArgument() = default;

OutOfMemory::OutOfMemory(const std::string& message, std::int64_t requested_bytes)
    : Error(message), requested_bytes_(requested_bytes) {}
OutOfMemory::~OutOfMemory() = default;

BackendError::BackendError(std::string backend, std::string function, int code,
                           std::string code_name, const std::string& message,
                           ErrorPersistence persistence)
    : Error(message),
      backend_(std::move(backend)),
      function_(std::move(function)),
      code_(code),
      code_name_(std::move(code_name)),
      persistence_(persistence) {}
BackendError::~BackendError() = default;

NoDevice::~NoDevice() = default;

}  // namespace devmem
