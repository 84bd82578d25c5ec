// DeviceNDArray (Numba's DeviceNDArray over a devmem::DeviceArray) and the functions that make
// and fill one: to_device, device_array, device_array_like. Numba's names, defaults and error
// types; devmem's stricter behaviour where docs/numba.md lists one (correct strided and
// negative-stride copies, reshape that never reinterprets memory, views that keep the stream).

#include "bindings.hpp"
#include "conversions.hpp"
#include "interop.hpp"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <array>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace devmem::python {

namespace {

std::string dtype_repr(const py::dtype& dtype) {
  return py::str(py::handle(dtype)).cast<std::string>();
}

void check_same_dtype(const py::dtype& a, const py::dtype& b) {
  if (!a.equal(b)) {
    throw py::type_error(
        fmt::format("incompatible dtype: {} vs. {}", dtype_repr(a), dtype_repr(b)));
  }
}

DeviceNDArray with_array(const DeviceNDArray& self, DeviceArray array) {
  return DeviceNDArray{std::move(array), self.dtype, self.stream_object};
}

/// `stream` itself when it is a devmem.Stream (kept so that `array.stream is stream`).
py::object stream_object_of(const py::object& stream) {
  return py::isinstance<Stream>(stream) ? stream : py::object();
}

/// Whether `obj` is devmem's MappedNDArray (a NumPy array that is also a device array): Numba's
/// `__cuda_memory__` marker, looked up only for objects that are not exactly ndarrays.
bool is_mapped_ndarray(const py::handle& obj) {
  static const py::handle ndarray = py::object(numpy().attr("ndarray")).release();
  if (Py_TYPE(obj.ptr()) == reinterpret_cast<PyTypeObject*>(ndarray.ptr())) return false;
  const py::object marker = py::getattr(obj, "__cuda_memory__", py::none());
  return py::isinstance<py::array>(obj) && !marker.is_none() && py::bool_(marker);
}

/// The number of axes `items` names explicitly (all but one `...`). IndexError for a second
/// `...` or more axes than the array has.
int explicit_axes_of(const py::tuple& items, int ndim) {
  int explicit_axes = 0;
  bool has_ellipsis = false;
  for (const py::handle item : items) {
    if (item.ptr() != Py_Ellipsis) {
      ++explicit_axes;
    } else if (std::exchange(has_ellipsis, true)) {
      throw py::index_error("an index can only have a single ellipsis ('...')");
    }
  }
  if (explicit_axes > ndim) {
    throw py::index_error(
        fmt::format("too many indices for array: array is {}-dimensional, but {} were indexed",
                    ndim, explicit_axes));
  }
  return explicit_axes;
}

/// A slice's start, stop or step. Beyond int64 it is clipped to int64's range, as NumPy clips
/// (np.arange(10)[1:2**100] has 9 elements): no axis is that long.
std::optional<std::int64_t> slice_bound(PyObject* value) {
  if (value == Py_None) return std::nullopt;
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long bound = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow > 0) return std::numeric_limits<std::int64_t>::max();
  if (overflow < 0) return std::numeric_limits<std::int64_t>::min();
  if (bound == -1 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  return bound;
}

DeviceArray apply_slice(const DeviceArray& view, int dim, py::handle item) {
  // The slice's fields directly: attribute lookups by name cost more than the slicing.
  const auto* const slice = reinterpret_cast<const PySliceObject*>(item.ptr());
  const std::optional<std::int64_t> step = slice_bound(slice->step);
  if (step == 0) throw py::value_error("slice step cannot be zero");
  return view.slice(dim, slice_bound(slice->start), slice_bound(slice->stop), step.value_or(1));
}

/// The integer `item` (anything with __index__) as an index of an axis of length `extent`
/// (axis `axis` of the original array): IndexError, naming the index as the caller wrote it,
/// outside [-extent, extent).
std::int64_t checked_index(py::handle item, std::int64_t extent, int axis) {
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long i = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (i == -1 && overflow == 0 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  if (overflow != 0 || i < -extent || i >= extent) {
    throw py::index_error(fmt::format("index {} is out of bounds for axis {} with size {}",
                                      py::str(index).cast<std::string>(), axis, extent));
  }
  return i;
}

/// `view` indexed by the integer `item` on axis `dim` (axis `axis` of the original array).
DeviceArray apply_integer(const DeviceArray& view, int dim, int axis, py::handle item) {
  return view.index(dim, checked_index(item, view.shape()[static_cast<std::size_t>(dim)], axis));
}

struct Selection {
  DeviceArray view;
  bool element;  // every axis was selected by an integer: the key names one element
};

/// The view that `key` (an int, a slice, Ellipsis or a tuple of them) selects.
Selection select(const DeviceArray& array, const py::object& key) {
  const py::tuple items =
      py::isinstance<py::tuple>(key) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  const int ndim = array.ndim();
  const int explicit_axes = explicit_axes_of(items, ndim);
  DeviceArray view = array;
  int dim = 0;  // the axis of `view` the next item applies to
  int integers = 0;
  for (const py::handle item : items) {
    if (item.ptr() == Py_Ellipsis) {
      dim += ndim - explicit_axes;
    } else if (PySlice_Check(item.ptr()) != 0) {
      view = apply_slice(view, dim++, item);
    } else if (PyIndex_Check(item.ptr()) != 0 && PyBool_Check(item.ptr()) == 0) {
      view = apply_integer(view, dim, dim + integers, item);
      ++integers;
    } else {
      throw py::index_error(fmt::format(
          "only integers, slices and Ellipsis ('...') are valid indices of a DeviceNDArray, got "
          "{}",
          py::repr(item).cast<std::string>()));
    }
  }
  return {std::move(view), integers == ndim};
}

/// The most axes whose element index element_index() parses on the stack (NumPy allows 64).
constexpr std::size_t max_fast_axes = 32;

/// The integers of `key` when it names one element of `array` (an integer for a 1-d array, or a
/// tuple of ndim integers; bools are not indices), checked against the axes with select()'s
/// messages; `found` false sends every other key to select().
struct ElementIndex {
  std::array<std::int64_t, max_fast_axes> values{};
  bool found = false;
};

/// Whether `item` is an index select() reads as an integer (an int, NumPy's integer types, any
/// __index__; not a bool), and if so its value, checked against the axis by checked_index.
bool parse_fast_integer(PyObject* item, std::int64_t extent, int axis, std::int64_t& out) {
  if (PyIndex_Check(item) == 0 || PyBool_Check(item) != 0) return false;
  out = checked_index(item, extent, axis);
  return true;
}

ElementIndex element_index(const DeviceArray& array, const py::object& key) {
  ElementIndex index;
  const auto ndim = static_cast<std::size_t>(array.ndim());
  if (ndim == 0 || ndim > max_fast_axes) return index;
  const Shape& shape = array.shape();
  if (PyTuple_Check(key.ptr()) != 0) {
    if (static_cast<std::size_t>(PyTuple_GET_SIZE(key.ptr())) != ndim) return index;
    for (std::size_t k = 0; k < ndim; ++k) {
      if (!parse_fast_integer(PyTuple_GET_ITEM(key.ptr(), static_cast<Py_ssize_t>(k)), shape[k],
                              static_cast<int>(k), index.values[k])) {
        return index;
      }
    }
  } else if (ndim != 1 || !parse_fast_integer(key.ptr(), shape[0], 0, index.values[0])) {
    return index;
  }
  index.found = true;
  return index;
}

py::object getitem(const DeviceNDArray& self, const py::object& key, const py::object& stream) {
  if (const ElementIndex index = element_index(self.array, key);
      index.found && !descriptor_fields(self.dtype).has_fields) {
    // One element (the common `d[5]`, `d[i, j]`): its bytes straight into a new 0-d array, no
    // view or host array made (DeviceArray::item_bytes), then NumPy's scalar of it.
    const Stream s = to_stream(stream);
    py::array scalar(self.dtype, std::vector<py::ssize_t>{});
    const std::span<std::byte> bytes(static_cast<std::byte*>(scalar.mutable_data()),
                                     static_cast<std::size_t>(self.array.itemsize()));
    without_gil([&] {
      self.array.item_bytes(std::span<const std::int64_t>(
                                index.values.data(), static_cast<std::size_t>(self.array.ndim())),
                            bytes, s);
    });
    return scalar[py::tuple()];
  }
  Selection selection = select(self.array, key);
  DeviceArray view = std::move(selection.view);
  const Stream s = to_stream(stream);
  if (s.is_specified()) view = view.bind(s);
  if (!selection.element || descriptor_fields(self.dtype).has_fields) {
    // A record element stays on the device, as Numba's DeviceRecord.
    return py::cast(DeviceNDArray{std::move(view), self.dtype, self.stream_object});
  }
  py::array scalar(self.dtype, std::vector<py::ssize_t>{});
  const HostArray destination = host_view(scalar, true);
  without_gil([&] {
    view.copy_to_host(destination, s);
    (s.is_specified() ? s : view.stream()).synchronize();
  });
  return scalar[py::tuple()];
}

void setitem(const DeviceNDArray& self, const py::object& key, const py::object& value,
             const py::object& stream) {
  const DeviceArray target = select(self.array, key).view;
  const Stream s = to_stream(stream);
  if (py::isinstance<DeviceNDArray>(value)) {
    const auto& source = value.cast<const DeviceNDArray&>();
    check_same_dtype(self.dtype, source.dtype);
    if (layout::same_squeezed_shape(source.array.shape(), target.shape())) {
      without_gil([&] { target.copy_to_device(source.array, s); });
      return;
    }
    // Broadcasting from a device array: through the host, where assign broadcasts.
    const HostArray staged = without_gil([&] { return source.array.copy_to_host(s); });
    without_gil([&] { target.assign(staged, s); });
    return;
  }
  const py::array host = as_numpy_array(value, self.dtype);
  const HostArray source = host_view(host, false);
  without_gil([&] { target.assign(source, s); });
}

std::vector<std::int64_t> squeezable_axes(const DeviceArray& array, const py::object& axis) {
  std::vector<std::int64_t> axes;
  if (axis.is_none()) return axes;
  axes = to_shape(axis, "axis");
  for (std::int64_t& a : axes) {
    if (a < -array.ndim() || a >= array.ndim()) {
      throw py::index_error(
          fmt::format("squeeze: axis {} is out of bounds for an array of {} "
                      "dimensions",
                      a, array.ndim()));
    }
    if (a < 0) a += array.ndim();
  }
  std::sort(axes.begin(), axes.end(), std::greater<>());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

py::object to_device_impl(const py::object& obj, const py::object& stream, bool copy,
                          const py::object& to) {
  const Stream s = to_stream(stream);
  if (!to.is_none()) {
    if (!py::isinstance<DeviceNDArray>(to)) {
      throw py::type_error(
          fmt::format("to_device: `to` must be a DeviceNDArray to copy into (or None), got {}",
                      py::repr(py::type::of(to)).cast<std::string>()));
    }
    auto& target = to.cast<DeviceNDArray&>();
    if (copy) {
      const py::array host = as_numpy_array(obj);
      check_same_dtype(target.dtype, host.dtype());
      const HostArray source = host_view(host, false);
      without_gil([&] { target.array.copy_to_device(source, s); });
    }
    return to;
  }
  // Numba's auto_device: device memory is returned as it is (no copy, whatever `stream` and
  // `copy` say); another producer of __cuda_array_interface__ becomes a view of its memory.
  if (py::isinstance<DeviceNDArray>(obj) || is_mapped_ndarray(obj)) return obj;
  if (!py::isinstance<py::array>(obj) && py::hasattr(obj, "__cuda_array_interface__")) {
    return py::module_::import("devmem._devmem").attr("as_cuda_array")(obj);
  }
  const py::array host = as_numpy_array(obj);
  const HostArray source = host_view(host, false);
  DeviceArray array = without_gil([&] { return to_device(source, {.stream = s, .copy = copy}); });
  return py::cast(DeviceNDArray{std::move(array), host.dtype(), stream_object_of(stream)});
}

py::object copy_to_host(const DeviceNDArray& a, const py::object& ary, const py::object& stream) {
  const Stream s = to_stream(stream);
  if (ary.is_none()) {
    // A NumPy array from NumPy's own allocator, laid out like the device array (dense, in its
    // axis order), filled by one exact copy: cheaper per call than wrapping a devmem host array.
    const Strides strides = layout::strides_like(a.array.layout());
    py::array out(a.dtype, std::vector<py::ssize_t>(a.array.shape().begin(), a.array.shape().end()),
                  std::vector<py::ssize_t>(strides.begin(), strides.end()));
    const HostArray destination = host_view(out, true);
    without_gil([&] { a.array.copy_to_host(destination, s); });
    return out;
  }
  if (!py::isinstance<py::array>(ary)) {
    throw py::type_error(fmt::format("copy_to_host: ary must be a NumPy array, got {}",
                                     py::repr(py::type::of(ary)).cast<std::string>()));
  }
  const auto destination_array = py::reinterpret_borrow<py::array>(ary);
  check_same_dtype(a.dtype, destination_array.dtype());
  const HostArray destination = host_view(destination_array, true);
  without_gil([&] { a.array.copy_to_host(destination, s); });
  return ary;
}

void copy_to_device(const DeviceNDArray& a, const py::object& ary, const py::object& stream) {
  const Stream s = to_stream(stream);
  if (py::isinstance<DeviceNDArray>(ary)) {
    const auto& source = ary.cast<const DeviceNDArray&>();
    check_same_dtype(a.dtype, source.dtype);
    without_gil([&] { a.array.copy_to_device(source.array, s); });
    return;
  }
  const py::array host = as_numpy_array(ary);
  check_same_dtype(a.dtype, host.dtype());
  const HostArray source = host_view(host, false);
  without_gil([&] { a.array.copy_to_device(source, s); });
}

DeviceNDArray reshape(const DeviceNDArray& a, const py::args& args, const py::kwargs& kwargs) {
  Order order = Order::C;
  for (const auto& [key, value] : kwargs) {
    if (key.cast<std::string>() != "order") {
      throw py::type_error(fmt::format("unknown keyword arguments {}",
                                       py::repr(kwargs.attr("keys")()).cast<std::string>()));
    }
    order = to_order(value, true);
  }
  const py::object shape = (args.size() == 1 && !PyIndex_Check(args[0].ptr()))
                               ? py::reinterpret_borrow<py::object>(args[0])
                               : py::object(args);
  Shape new_shape = to_shape(shape);
  return with_array(a, without_gil([&] { return a.array.reshape(new_shape, order); }));
}

DeviceNDArray squeeze(const DeviceNDArray& a, const py::object& axis, const py::object& stream) {
  DeviceArray view = a.array;
  if (axis.is_none()) {
    view = view.squeeze();
  } else {
    for (const std::int64_t axis_index : squeezable_axes(view, axis)) {
      view = view.squeeze(static_cast<int>(axis_index));
    }
  }
  const Stream s = to_stream(stream);
  return with_array(a, s.is_specified() ? view.bind(s) : view);
}

/// DeviceNDArray.stream: the Stream object it was given as, while the array's stream is that one.
py::object array_stream(const DeviceNDArray& a) {
  const Stream s = a.array.stream();
  if (a.stream_object && a.stream_object.cast<const Stream&>() == s) return a.stream_object;
  return py::cast(s);
}

/// iter(d): d[0], d[1], ... (CPython's sequence iterator, until IndexError); TypeError for a 0-d
/// array, as NumPy.
py::iterator iterate(const py::object& self) {
  if (self.cast<const DeviceNDArray&>().array.ndim() == 0) {
    throw py::type_error("iteration over a 0-d array");
  }
  return py::reinterpret_steal<py::iterator>(PySeqIter_New(self.ptr()));
}

}  // namespace

void bind_device_ndarray(py::module_& m) {
  py::class_<DeviceNDArray> cls(m, "DeviceNDArray",
                                "An n-d array in device memory (Numba's DeviceNDArray).");
  cls.def_property_readonly("shape",
                            [](const DeviceNDArray& a) { return to_tuple(a.array.shape()); })
      .def_property_readonly("strides",
                             [](const DeviceNDArray& a) { return to_tuple(a.array.strides()); })
      .def_readonly("dtype", &DeviceNDArray::dtype)
      .def_property_readonly("size", [](const DeviceNDArray& a) { return a.array.size(); })
      .def_property_readonly("nbytes", [](const DeviceNDArray& a) { return a.array.nbytes(); })
      .def_property_readonly("ndim", [](const DeviceNDArray& a) { return a.array.ndim(); })
      .def_property_readonly("itemsize", [](const DeviceNDArray& a) { return a.array.itemsize(); })
      .def_property_readonly("alloc_size",
                             [](const DeviceNDArray& a) { return a.array.alloc_size(); })
      .def_property_readonly("stream", &array_stream)
      .def_property_readonly(
          "device_pointer",
          [](const DeviceNDArray& a) { return reinterpret_cast<std::uintptr_t>(a.array.data()); },
          "The address of element 0 as an integer (0 for an empty array).")
      .def_property_readonly(
          "device_ctypes_pointer",
          [](const DeviceNDArray& a) {
            static const py::handle c_void_p =
                py::object(py::module_::import("ctypes").attr("c_void_p")).release();
            return c_void_p(reinterpret_cast<std::uintptr_t>(a.array.data()));
          },
          "Numba's device_ctypes_pointer: element 0's address as a ctypes.c_void_p.")
      .def_property_readonly("flags",
                             [](const DeviceNDArray& a) {
                               py::dict flags;
                               flags["C_CONTIGUOUS"] = a.array.is_c_contiguous();
                               flags["F_CONTIGUOUS"] = a.array.is_f_contiguous();
                               return flags;
                             })
      .def("is_c_contiguous", [](const DeviceNDArray& a) { return a.array.is_c_contiguous(); })
      .def("is_f_contiguous", [](const DeviceNDArray& a) { return a.array.is_f_contiguous(); })
      .def("__len__",
           [](const DeviceNDArray& a) {
             if (a.array.ndim() == 0) throw py::type_error("len() of unsized object");
             return a.array.shape().front();
           })
      .def("__iter__", &iterate)
      .def("__delitem__",
           [](const DeviceNDArray& /*a*/, const py::object& /*key*/) {
             throw py::value_error("cannot delete array elements");
           })
      .def("copy_to_host", &copy_to_host, py::arg("ary") = py::none(), py::arg("stream") = 0,
           "Copies to a new NumPy array, or into `ary` (same dtype and shape); returns it.")
      .def("copy_to_device", &copy_to_device, py::arg("ary"), py::arg("stream") = 0,
           "Copies from a NumPy array (or anything np.asarray takes) or another DeviceNDArray.")
      .def(
          "get",
          [](const DeviceNDArray& a, const py::object& stream, const py::object& out) {
            return copy_to_host(a, out, stream);
          },
          py::arg("stream") = py::none(), py::arg("out") = py::none(),
          "CuPy's name for copy_to_host: a NumPy array of the values (into `out` if given).")
      .def(
          "set",
          [](const DeviceNDArray& a, const py::object& arr, const py::object& stream) {
            copy_to_device(a, arr, stream);
          },
          py::arg("arr"), py::arg("stream") = py::none(),
          "CuPy's name for copy_to_device: copies `arr` (same dtype and shape) into the array.")
      .def("reshape", &reshape,
           "A view with a new shape (a copy when no view can give NumPy's result).")
      .def(
          "ravel",
          [](const DeviceNDArray& a, const py::object& order, const py::object& stream) {
            // NumPy's orders, K included (memory order: a view of any dense array).
            const Order o = py::isinstance<py::str>(order) && order.cast<std::string>() == "K"
                                ? Order::K
                                : to_order(order, true);
            const Stream s = to_stream(stream);
            return with_array(a, without_gil([&] { return a.array.ravel(o, s); }));
          },
          py::arg("order") = "C", py::arg("stream") = 0,
          "A 1-d array of the elements in `order` (a view where the layout allows).")
      .def(
          "transpose",
          [](const DeviceNDArray& a, const py::object& axes) {
            if (axes.is_none()) return with_array(a, a.array.transpose());
            const Shape given = to_shape(axes, "axes");
            const std::vector<int> order(given.begin(), given.end());
            return with_array(a, a.array.transpose(order));
          },
          py::arg("axes") = py::none(), "A view with the axes reversed, or permuted by `axes`.")
      .def_property_readonly("T", [](const DeviceNDArray& a) { return with_array(a, a.array.T()); })
      .def(
          "split",
          [](const DeviceNDArray& a, std::int64_t section, const py::object& stream) {
            const Stream s = to_stream(stream);
            std::vector<DeviceNDArray> parts;
            for (DeviceArray& part : a.array.split(section, s)) {
              parts.push_back(with_array(a, std::move(part)));
            }
            return parts;
          },
          py::arg("section"), py::arg("stream") = 0,
          "Views of `section` elements each (the last smaller); 1-d arrays only.")
      .def(
          "view",
          [](const DeviceNDArray& a, const py::object& dtype) {
            const py::dtype type = as_numpy_dtype(dtype);
            return DeviceNDArray{a.array.view(to_devmem_dtype(type)), type, a.stream_object};
          },
          py::arg("dtype"), "The same bytes as another dtype (NumPy's rules).")
      .def("squeeze", &squeeze, py::arg("axis") = py::none(), py::arg("stream") = 0)
      .def(
          "bind",
          [](const DeviceNDArray& a, const py::object& stream) {
            DeviceNDArray bound = with_array(a, a.array.bind(to_stream(stream)));
            bound.stream_object = stream_object_of(stream);
            return bound;
          },
          py::arg("stream") = 0, "The same array with `stream` as its own stream.")
      .def(
          "copy",
          [](const DeviceNDArray& a, const py::object& order, const py::object& stream) {
            const Order o = py::isinstance<py::str>(order) && order.cast<std::string>() == "K"
                                ? Order::K
                                : to_order(order, true);
            const Stream s = to_stream(stream);
            return with_array(a, without_gil([&] { return a.array.copy(o, s); }));
          },
          py::arg("order") = "K", py::arg("stream") = 0, "A new device array with the same values.")
      .def("__getitem__", [](const DeviceNDArray& a,
                             const py::object& key) { return getitem(a, key, py::int_(0)); })
      .def("getitem", &getitem, py::arg("item"), py::arg("stream") = 0)
      .def("__setitem__", [](const DeviceNDArray& a, const py::object& key,
                             const py::object& value) { setitem(a, key, value, py::int_(0)); })
      .def("setitem", &setitem, py::arg("key"), py::arg("value"), py::arg("stream") = 0)
      .def(
          "__array__",
          [](const DeviceNDArray& a, const py::object& dtype, const py::object& copy) {
            // NumPy 2 passes copy= (np.array(d, copy=False), np.asarray(d, copy=False)): device
            // memory reaches the host only as a copy, so "never copy" cannot be honoured.
            if (!copy.is_none() && !py::bool_(copy)) {
              throw py::value_error(
                  "Unable to avoid copy while creating an array as requested: a DeviceNDArray "
                  "reaches the host only as a copy (use copy=None or copy=True)");
            }
            const HostArray host = without_gil([&] { return a.array.copy_to_host(); });
            py::object out = to_numpy(host, a.dtype);
            if (!dtype.is_none()) out = out.attr("astype")(dtype, py::arg("copy") = false);
            return out;
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none(),
          "A NumPy array with a copy of the values (NumPy's protocol; copy=False is refused).")
      .def(
          "record_use",
          [](const DeviceNDArray& a, const py::object& stream) {
            const Stream s = to_stream(stream);
            if (!s.is_specified()) {
              throw py::value_error(
                  "record_use: pass the stream the untracked work runs on (a devmem.Stream, e.g. "
                  "devmem.external_stream(torch.cuda.current_stream())), not the default");
            }
            a.array.record_use(s);
          },
          py::arg("stream"),
          "States that work devmem does not see (a PyTorch/CuPy kernel reading this array through "
          "__cuda_array_interface__ or DLPack) runs on `stream`: the memory is not reused before "
          "the work queued there so far has completed, even if this array is dropped first.")
      .def("__repr__", [](const DeviceNDArray& a) {
        return fmt::format("<devmem.DeviceNDArray shape={} dtype={} on {} device {}>",
                           layout::format_tuple(a.array.shape()), dtype_repr(a.dtype),
                           backend_name(), a.array.context()->device());
      });
  // Interop (defined in interop.cpp).
  cls.def("__dlpack__", &export_dlpack, py::kw_only(), py::arg("stream") = py::none(),
          py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
          py::arg("copy") = py::none(),
          "A DLPack capsule viewing the array (a copy for copy=True). A bool array is kDLBool for "
          "a consumer that passes max_version >= (1, 0) (DLPack 1 knows kDLBool), otherwise "
          "uint8.")
      .def("__dlpack_device__", &dlpack_device)
      .def_property_readonly("__cuda_array_interface__", &cuda_array_interface,
                             "CUDA Array Interface v3 (cuda and roc backends).")
      .def("get_ipc_handle", &export_ipc,
           "An IPC handle another process can open (devmem.open_ipc_array); it carries the "
           "array's full NumPy dtype.");

  m.def("to_device", &to_device_impl, py::arg("obj"), py::arg("stream") = 0, py::arg("copy") = true,
        py::arg("to") = py::none(),
        "Copies a NumPy array (or anything np.asarray takes) to a new device array, or into `to`.");
  m.def(
      "device_array",
      [](const py::object& shape, const py::object& dtype, const py::object& strides,
         const py::object& order, const py::object& stream) {
        AllocationArguments args = allocation_arguments(shape, dtype, strides, order);
        const Stream s = to_stream(stream);
        DeviceArray array = without_gil([&] {
          return device_array(std::move(args.shape), args.element, std::move(args.strides),
                              args.order, s);
        });
        return DeviceNDArray{std::move(array), args.dtype, stream_object_of(stream)};
      },
      py::arg("shape"), py::arg("dtype") = py::dtype("float64"), py::arg("strides") = py::none(),
      py::arg("order") = "C", py::arg("stream") = 0, "An uninitialised device array.");
  m.def(
      "device_array_like",
      [](const py::object& ary, const py::object& stream) {
        const Stream s = to_stream(stream);
        if (py::isinstance<DeviceNDArray>(ary)) {
          const auto& like = ary.cast<const DeviceNDArray&>();
          return DeviceNDArray{without_gil([&] { return device_array_like(like.array, s); }),
                               like.dtype};
        }
        const py::array host = as_numpy_array(ary);
        const HostArray like = host_view(host, false);
        return DeviceNDArray{without_gil([&] { return device_array_like(like, s); }), host.dtype()};
      },
      py::arg("ary"), py::arg("stream") = 0,
      "An uninitialised device array with the shape, dtype and layout of `ary`.");
}

}  // namespace devmem::python
