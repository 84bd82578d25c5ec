// GilRelease's destructor and GilAcquire's constructor (conversions.hpp says why they exist),
// compiled into both extension modules (_devmem and _mpi), which release the GIL the same way.
#include "conversions.hpp"

#include <unistd.h>

#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif

namespace devmem::python {

void park_thread_until_exit() noexcept {
  for (;;) pause();
}

GilRelease::~GilRelease() {
#if defined(__GLIBCXX__)
  try {
    PyEval_RestoreThread(state_);
  } catch (abi::__forced_unwind&) {
    // CPython called pthread_exit: the interpreter is finalising and this is a daemon thread.
    // Rethrowing would leave this noexcept destructor (std::terminate); letting the thread go
    // on would run Python without the GIL. Neither: the thread never returns.
    park_thread_until_exit();
  }
#else
  PyEval_RestoreThread(state_);
#endif
}

GilAcquire::GilAcquire() noexcept {
#if defined(__GLIBCXX__)
  try {
    state_ = PyGILState_Ensure();
  } catch (abi::__forced_unwind&) {
    park_thread_until_exit();
  }
#else
  state_ = PyGILState_Ensure();
#endif
}

}  // namespace devmem::python
