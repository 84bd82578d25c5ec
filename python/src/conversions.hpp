#pragma once

#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif
// Conversions between Python objects and devmem's C++ types, shared by every binding file: NumPy
// dtypes, shapes and strides, Numba's `stream=0` convention, host arrays viewing NumPy memory, and
// the keep-alive that lets devmem hold a Python object from any thread.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <devmem/devmem.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace devmem::python {

namespace py = pybind11;

/// A DeviceArray as Python sees it: devmem's array plus the NumPy dtype it was made with (field
/// names and byte order live only on the Python side; devmem keeps kind, size and alignment).
struct DeviceNDArray {
  DeviceArray array;
  py::dtype dtype;
  /// The Python Stream object the array's stream was given as (bind(s), device_array(stream=s)),
  /// so that `d.bind(s).stream is s` as in Numba; empty when none was.
  py::object stream_object{};
};

/// The numpy module (imported on first use).
[[nodiscard]] py::handle numpy();

/// Whether the pybind11 this module is compiled with reads NumPy's dtype descriptors with the
/// layout of the NumPy that runs (NumPy 1 and 2 differ): pybind11 >= 2.12 chooses at run time,
/// older releases know NumPy 1's layout only.
inline constexpr bool kPybind11KnowsNumpy2 = PYBIND11_VERSION_HEX >= 0x020C0000;
/// The pybind11 version this module is compiled with, e.g. "2.13.6".
[[nodiscard]] std::string pybind11_version();
/// Why this module cannot run with NumPy `numpy_version` (its `numpy.__version__`), naming both
/// versions: NumPy >= 2 with a module compiled by pybind11 < 2.12. Empty when it can.
[[nodiscard]] std::string numpy_support_error(std::string_view numpy_version);

/// What devmem reads from a NumPy dtype's descriptor, through the layout of the NumPy that runs.
struct DescriptorFields {
  char kind = 0;
  bool legacy = true;          // a NumPy 1 style dtype (NumPy 2's new DType API ones are not)
  bool holds_objects = false;  // Python references inside (object dtype, or records with them)
  bool has_subarray = false;
  bool has_fields = false;  // a structured dtype
  std::int64_t itemsize = 0;
  std::int64_t alignment = 0;
};
[[nodiscard]] DescriptorFields descriptor_fields(const py::dtype& dtype);

/// The devmem element type of a NumPy dtype. TypeError for object dtypes and sub-array dtypes.
/// Kinds devmem has no name for (datetime, bytes, unicode) travel as opaque records of the same
/// size and alignment: their bytes are copied exactly and the NumPy dtype is kept beside.
[[nodiscard]] DType to_devmem_dtype(const py::dtype& dtype);
/// The NumPy dtype of a devmem element type (records become opaque void types of their size).
[[nodiscard]] py::dtype to_numpy_dtype(const DType& dtype);
/// np.dtype(obj), TypeError naming `obj` when NumPy cannot make a dtype of it.
[[nodiscard]] py::dtype as_numpy_dtype(py::handle obj);

/// An integer (a Python int or anything with __index__) as int64; ValueError naming `what` and
/// the value when it does not fit (NumPy: "Maximum allowed dimension exceeded").
[[nodiscard]] std::int64_t to_int64(py::handle obj, const char* what);
/// An int or a sequence of ints (Python or NumPy integers) as a shape; TypeError otherwise, as
/// numba-cuda: "shape must be an integer or tuple of integers".
[[nodiscard]] Shape to_shape(py::handle obj, const char* what = "shape");
/// The arguments every allocation function takes (Numba's shape, dtype, strides and order),
/// converted and checked.
struct AllocationArguments {
  py::dtype dtype;
  DType element;
  Shape shape;
  Strides strides;
  Order order = Order::C;
};
[[nodiscard]] AllocationArguments allocation_arguments(const py::object& shape,
                                                       const py::object& dtype,
                                                       const py::object& strides,
                                                       const py::object& order);

/// `order` as Numba spells it: 'C' or 'F' (and 'A' where `allow_any`); ValueError otherwise.
[[nodiscard]] Order to_order(py::handle obj, bool allow_any = false);
/// Numba's stream argument: 0, None or False mean "no stream" (the array's own or the default);
/// a devmem.Stream is that stream; anything else is a TypeError.
[[nodiscard]] Stream to_stream(py::handle obj);
/// devmem.external_stream: a foreign stream (an int handle, or an object with __cuda_stream__)
/// wrapped by Stream::external on `device` (None: the current device).
[[nodiscard]] Stream external_stream(py::handle obj, const py::object& device);
[[nodiscard]] py::tuple to_tuple(std::span<const std::int64_t> values);

/// Keeps `obj` alive for as long as devmem holds the returned pointer. The last holder may be
/// any thread (a stream's completion callback): the reference is dropped at once when that thread
/// holds the GIL, otherwise queued and dropped by the next binding call that does.
[[nodiscard]] std::shared_ptr<const void> keep_python_object(py::handle obj);
/// Drops the references queued by keep_python_object; called with the GIL held.
void release_queued_python_objects();

/// A host array viewing a NumPy array's memory (its strides kept), owned by the NumPy array.
/// `writable` asks for a writable view: ValueError for a read-only NumPy array.
[[nodiscard]] HostArray host_view(const py::array& array, bool writable);
/// A NumPy array over a devmem host array's memory; the NumPy array keeps it alive.
[[nodiscard]] py::array to_numpy(const HostArray& host, const py::dtype& dtype);

/// np.asarray(obj) without a copy when obj already is an ndarray.
[[nodiscard]] py::array as_numpy_array(py::handle obj);
/// np.asarray(obj, dtype): converted to `dtype` where it differs.
[[nodiscard]] py::array as_numpy_array(py::handle obj, const py::dtype& dtype);

/// Releases the GIL for its lifetime, like pybind11's gil_scoped_release, but survives the
/// interpreter's exit (docs/python.md#threads): when Python finalises while a daemon thread is
/// inside a devmem call, CPython's PyEval_RestoreThread ends that thread with pthread_exit, a
/// forced unwind, which std::terminate()s the process where it leaves a noexcept frame (this
/// destructor). The destructor catches the forced unwind instead and parks the thread for good:
/// it never runs Python code again, drops no reference without the GIL, and dies with the process
/// (what CPython 3.14 does itself, PyThread_hang_thread).
class GilRelease {
 public:
  GilRelease() noexcept : state_(PyEval_SaveThread()) {}
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;
  GilRelease(GilRelease&&) = delete;
  GilRelease& operator=(GilRelease&&) = delete;
  ~GilRelease();

 private:
  PyThreadState* state_;
};

/// A thread that CPython ends at its exit (GilRelease, GilAcquire, run_python) waits here until
/// the process is gone.
[[noreturn]] void park_thread_until_exit() noexcept;

/// Runs `fn`, Python code called with the GIL held from devmem's C++ (a memory manager written in
/// Python). A daemon thread running Python while the interpreter finalises is ended by CPython at
/// its next GIL switch (pthread_exit: a forced unwind); unwinding through devmem's frames, whose
/// noexcept frees and catch-alls cannot let it pass, would end the whole process ("terminate
/// called without an active exception", seen 1 run in 150). The thread is parked instead.
template <class Fn>
decltype(auto) run_python(Fn&& fn) {
#if defined(__GLIBCXX__)
  try {
    return fn();
  } catch (abi::__forced_unwind&) {
    park_thread_until_exit();
  }
#else
  return fn();
#endif
}

/// Takes the GIL for its lifetime on any thread (PyGILState_Ensure), for devmem's calls into Python
/// code (a memory manager written in Python) from threads that may not hold it. Where CPython
/// ends the thread inside (a daemon thread while the interpreter finalises) the thread is parked,
/// as in GilRelease's destructor, instead of unwinding through devmem's noexcept frees.
class GilAcquire {
 public:
  GilAcquire() noexcept;
  GilAcquire(const GilAcquire&) = delete;
  GilAcquire& operator=(const GilAcquire&) = delete;
  GilAcquire(GilAcquire&&) = delete;
  GilAcquire& operator=(GilAcquire&&) = delete;
  ~GilAcquire() { PyGILState_Release(state_); }

 private:
  PyGILState_STATE state_{};
};

/// Runs `fn` with the GIL released: every devmem call that may wait for a stream goes through
/// here, so that other Python threads, and keep-alives dropped on other threads, never stall.
template <class Fn>
decltype(auto) without_gil(Fn&& fn) {
  const GilRelease release;
  return fn();
}

}  // namespace devmem::python
