// Shared by the test programs (conformance suite, fault sweep): devmem reports the failures it
// cannot throw (destructors, implicit deallocation flushes) on stderr, and tests check them.
#pragma once

#include <unistd.h>  // dup, dup2, close

#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace test_support {

/// Redirects the process's stderr (file descriptor 2) into a temporary file until finish() or
/// destruction. Throws std::runtime_error if the redirection cannot be set up.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()) {
    if (file_ == nullptr) throw std::runtime_error("StderrCapture: tmpfile failed");
    std::fflush(stderr);
    saved_ = ::dup(2);
    if (saved_ < 0 || ::dup2(::fileno(file_), 2) < 0) {
      if (saved_ >= 0) ::close(saved_);
      std::fclose(file_);
      throw std::runtime_error("StderrCapture: redirecting stderr failed");
    }
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  ~StderrCapture() {
    restore();
    std::fclose(file_);
  }

  /// Restores stderr and returns what was written meanwhile.
  std::string finish() {
    restore();
    std::string text;
    std::rewind(file_);
    std::array<char, 4096> buffer{};
    std::size_t n = 0;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), file_)) > 0)
      text.append(buffer.data(), n);
    return text;
  }

 private:
  void restore() noexcept {
    if (saved_ < 0) return;
    std::fflush(stderr);
    static_cast<void>(::dup2(saved_, 2));
    ::close(saved_);
    saved_ = -1;
  }
  std::FILE* file_;
  int saved_ = -1;
};

}  // namespace test_support
