// <devmem/kernel.hpp>'s checks of launch's arguments: which argument types fit which kernel
// parameters (refused at compile time, each case with its own message naming the position), how
// an argument becomes its parameter (a DeviceArray or MappedArray a checked ArrayView; a struct's
// listed views marked launched), and which memory launch keeps alive until the kernel has run.
// Apart from kernel.hpp because it is the one part of launch that is type machinery rather than
// interface. Included by kernel.hpp only, after the declarations of the run-time checks it calls
// (PreparedLaunch, launch_check_array, throw_argument_error, launch_view_owner, check_view_alive).
#pragma once

#include <devmem/array_view.hpp>
#include <devmem/device_array.hpp>
#include <devmem/error.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace devmem::detail {

template <class Arg>
inline constexpr bool is_array_view_argument = false;
template <class T, std::size_t Rank>
inline constexpr bool is_array_view_argument<ArrayView<T, Rank>> = true;

/// A struct that lists the ArrayView members launch is to check and keep alive:
///   struct Params {
///     devmem::ArrayView<float, 1> x;
///     float v;
///     auto devmem_views() const { return std::tie(x); }
///   };
template <class S>
concept HasKernelViews = std::is_class_v<S> && requires(const S& s) { s.devmem_views(); };

template <class Tuple>
inline constexpr bool is_tuple_of_view_references = false;
template <class... E>
inline constexpr bool is_tuple_of_view_references<std::tuple<E...>> =
    ((std::is_lvalue_reference_v<E> && is_array_view_argument<std::remove_cvref_t<E>>)&&...);

/// A struct whose devmem_views() is as it should be: launch uses its views.
template <class S>
concept ListsKernelViews =
    HasKernelViews<S> &&
    is_tuple_of_view_references<decltype(std::declval<const S&>().devmem_views())>;

/// A reference from devmem_views() const, to an object launch made and may write.
template <class T, std::size_t Rank>
ArrayView<T, Rank>& as_mutable(const ArrayView<T, Rank>& view) {
  return const_cast<ArrayView<T, Rank>&>(view);
}

/// What a kernel parameter of type Param is given for an argument of type Arg: a DeviceArray
/// becomes a checked ArrayView, anything else is converted as by a function call. Only reached for
/// arguments that argument_fit accepts (launch checks them first, with readable messages).
template <class Param>
struct KernelArgument {
  template <class Arg>
  static Param convert(const PreparedLaunch&, Arg&& arg, std::size_t) {
    auto param = static_cast<Param>(std::forward<Arg>(arg));
    if constexpr (ListsKernelViews<Param>) {
      // `param` is not const: the references devmem_views() const returns may be written.
      std::apply([](const auto&... view) { (ViewAccess::mark_launched(as_mutable(view)), ...); },
                 std::as_const(param).devmem_views());
    }
    return param;
  }
};
template <class T, std::size_t Rank>
struct KernelArgument<ArrayView<T, Rank>> {
  static ArrayView<T, Rank> convert(const PreparedLaunch& launch, const DeviceArray& array,
                                    std::size_t index) {
    launch_check_array(launch, array, index);
    try {
      return launched(array.template view<T, Rank>());
    } catch (const InvalidArgument& e) {
      throw_argument_error(launch, index, e.what());
    }
  }
  template <class U>
    requires std::is_same_v<U, T> || std::is_same_v<const U, T>
  static ArrayView<T, Rank> convert(const PreparedLaunch&, const ArrayView<U, Rank>& view,
                                    std::size_t) {
    return launched(view);
  }

 private:
  static ArrayView<T, Rank> launched(ArrayView<T, Rank> view) {
    ViewAccess::mark_launched(view);
    return view;
  }
};

/// A DeviceArray, or a ManagedArray (<devmem/managed.hpp>), which is one.
template <class Arg>
inline constexpr bool is_device_array_argument =
    std::is_base_of_v<DeviceArray, std::remove_cvref_t<Arg>>;

/// True when an ArrayView argument of type View may be passed for the ArrayView parameter Param
/// (the same view, or a view of non-const elements for a parameter of const ones).
template <class Param, class View>
inline constexpr bool is_view_convertible = false;
template <class T, std::size_t Rank, class U>
inline constexpr bool is_view_convertible<ArrayView<T, Rank>, ArrayView<U, Rank>> =
    std::is_same_v<T, U> || std::is_same_v<T, const U>;

/// How an argument of type Arg fits a kernel parameter of type Param (both without references):
/// the cases launch refuses at compile time, each with its own message.
enum class ArgumentFit {
  Ok,
  HostArray,        // host memory for a device parameter
  ViewMismatch,     // an ArrayView of another element type or rank
  NotAnArray,       // something else than an array for an ArrayView parameter
  ArrayForNonView,  // an array for a parameter that is not an ArrayView
  NotConvertible,   // a value the parameter cannot be made from
  Narrowing,        // a number its arithmetic parameter may not hold (see is_narrowing)
  BadViewList,      // a struct whose devmem_views() is not std::tie of ArrayView members
};

/// True when an arithmetic Arg given for an arithmetic Param is a narrowing conversion as brace
/// initialisation defines it (by type: a wider integer, another signedness, a floating-point value
/// for an integer, a double for a float, an integer for a floating-point type). A kernel's
/// parameters are set by a conversion that no compiler warns about, so launch refuses these:
/// 2^32 + 4 given for an int would arrive as 4.
template <class Param, class Arg>
inline constexpr bool is_narrowing = std::is_arithmetic_v<Param> && std::is_arithmetic_v<Arg> &&
                                     !requires(const Arg& arg) { Param{arg}; };

template <class Param, class Arg>
[[nodiscard]] constexpr ArgumentFit argument_fit() {
  constexpr bool is_mapped = std::is_base_of_v<MappedArray, Arg>;
  constexpr bool is_host = std::is_base_of_v<HostArray, Arg> && !is_mapped;
  if constexpr (is_array_view_argument<Param>) {
    if constexpr (is_device_array_argument<Arg> || is_mapped) {
      return ArgumentFit::Ok;
    } else if constexpr (is_host) {
      return ArgumentFit::HostArray;
    } else if constexpr (is_array_view_argument<Arg>) {
      return is_view_convertible<Param, Arg> ? ArgumentFit::Ok : ArgumentFit::ViewMismatch;
    } else {
      return ArgumentFit::NotAnArray;
    }
  } else if constexpr (HasKernelViews<Param> && !ListsKernelViews<Param>) {
    return ArgumentFit::BadViewList;
  } else if constexpr (is_narrowing<Param, Arg>) {
    return ArgumentFit::Narrowing;
  } else if constexpr (requires(const Arg& arg) { static_cast<Param>(arg); }) {
    return ArgumentFit::Ok;
  } else if constexpr (is_host) {
    return ArgumentFit::HostArray;
  } else if constexpr (is_device_array_argument<Arg> || is_mapped || is_array_view_argument<Arg>) {
    return ArgumentFit::ArrayForNonView;
  } else {
    return ArgumentFit::NotConvertible;
  }
}

// static_assert messages must be string literals (C++20), so the position is spelled out by a
// macro for the first 16 arguments; later ones get the message without it.
#define DEVMEM_DETAIL_CHECK_ARGUMENT(N)                                                         \
  static_assert(I != (N) || Fit != ArgumentFit::HostArray,                                      \
                "devmem::launch: argument " #N                                                  \
                " is host memory (HostArray): use to_device() or "                              \
                "mapped_array()");                                                              \
  static_assert(I != (N) || Fit != ArgumentFit::ViewMismatch,                                   \
                "devmem::launch: argument " #N                                                  \
                " is an ArrayView of another element type or "                                  \
                "rank than the kernel's parameter: pass a DeviceArray or a view of that type"); \
  static_assert(I != (N) || Fit != ArgumentFit::NotAnArray,                                     \
                "devmem::launch: argument " #N                                                  \
                " is not an array but the kernel's parameter is "                               \
                "an ArrayView: pass a DeviceArray, a MappedArray or an ArrayView");             \
  static_assert(I != (N) || Fit != ArgumentFit::ArrayForNonView,                                \
                "devmem::launch: argument " #N                                                  \
                " is an array but the kernel's parameter is not "                               \
                "an ArrayView: declare the parameter as devmem::ArrayView<T, Rank>");           \
  static_assert(I != (N) || Fit != ArgumentFit::NotConvertible,                                 \
                "devmem::launch: argument " #N                                                  \
                " cannot be converted to the kernel's parameter "                               \
                "type");                                                                        \
  static_assert(I != (N) || Fit != ArgumentFit::Narrowing,                                      \
                "devmem::launch: argument " #N                                                  \
                " would be narrowed to the kernel's arithmetic parameter (a wider or other-"    \
                "signed integer, a floating-point value for an integer, a double for a float: " \
                "what brace initialisation refuses): pass the parameter's type (2.0f, 5u) or "  \
                "static_cast the value");                                                       \
  static_assert(I != (N) || Fit != ArgumentFit::BadViewList,                                    \
                "devmem::launch: argument " #N                                                  \
                " is a struct whose devmem_views() does not return std::tie(...) of its "       \
                "ArrayView members: return references to them, so that launch checks the "      \
                "struct's own views")

/// Fails to compile, naming the position I (counting from 0, as launch's run-time messages do),
/// when the argument does not fit its parameter; true otherwise.
template <std::size_t I, ArgumentFit Fit>
constexpr bool check_argument() {
  DEVMEM_DETAIL_CHECK_ARGUMENT(0);
  DEVMEM_DETAIL_CHECK_ARGUMENT(1);
  DEVMEM_DETAIL_CHECK_ARGUMENT(2);
  DEVMEM_DETAIL_CHECK_ARGUMENT(3);
  DEVMEM_DETAIL_CHECK_ARGUMENT(4);
  DEVMEM_DETAIL_CHECK_ARGUMENT(5);
  DEVMEM_DETAIL_CHECK_ARGUMENT(6);
  DEVMEM_DETAIL_CHECK_ARGUMENT(7);
  DEVMEM_DETAIL_CHECK_ARGUMENT(8);
  DEVMEM_DETAIL_CHECK_ARGUMENT(9);
  DEVMEM_DETAIL_CHECK_ARGUMENT(10);
  DEVMEM_DETAIL_CHECK_ARGUMENT(11);
  DEVMEM_DETAIL_CHECK_ARGUMENT(12);
  DEVMEM_DETAIL_CHECK_ARGUMENT(13);
  DEVMEM_DETAIL_CHECK_ARGUMENT(14);
  DEVMEM_DETAIL_CHECK_ARGUMENT(15);
  static_assert(I < 16 || Fit == ArgumentFit::Ok,
                "devmem::launch: an argument after the 16th does not fit its kernel parameter "
                "(see the ArgumentFit value above)");
  return Fit == ArgumentFit::Ok;
}
#undef DEVMEM_DETAIL_CHECK_ARGUMENT

/// True when every argument fits its parameter (compile errors naming the others). The types come
/// as tuples: two packs cannot both be given explicitly.
template <class ParamTuple, class ArgTuple, std::size_t... I>
constexpr bool check_arguments(std::index_sequence<I...>) {
  return (
      check_argument<I, argument_fit<std::remove_cvref_t<std::tuple_element_t<I, ParamTuple>>,
                                     std::remove_cvref_t<std::tuple_element_t<I, ArgTuple>>>()>() &&
      ...);
}

/// A MappedArray given for an ArrayView parameter becomes its device view (made once: the view
/// is checked, converted and kept alive like any DeviceArray argument); anything else is passed
/// on as it is.
template <class Param, class Arg>
decltype(auto) launch_argument(Arg&& arg) {
  if constexpr (is_array_view_argument<std::remove_cvref_t<Param>> &&
                std::is_base_of_v<MappedArray, std::remove_cvref_t<Arg>>) {
    return arg.device();
  } else {
    return std::forward<Arg>(arg);
  }
}

/// Adds the memory of argument `index`, a view, to `objects` (InvalidArgument when the view's
/// array has been freed, see launch_view_owner).
template <class T, std::size_t Rank>
void keep_view_alive(const PreparedLaunch& launch, std::size_t index,
                     const ArrayView<T, Rank>& view,
                     std::vector<std::shared_ptr<const void>>& objects) {
  if (const std::uint64_t generation = ViewAccess::generation(view); generation != 0) {
    std::int64_t shape[Rank + 1] = {};
    for (std::size_t d = 0; d != Rank; ++d) shape[d] = view.shape(d);
    check_view_alive(launch, index, view.data(), generation, shape, Rank);
  }
  if (auto owner = launch_view_owner(view.data())) objects.push_back(std::move(owner));
}

/// Adds the memory of argument `index` to `objects` when it is an array, a view, or a struct
/// listing views (InvalidArgument for a view of a freed array).
template <class Arg>
void keep_argument_alive(const PreparedLaunch& launch, std::size_t index, const Arg& arg,
                         std::vector<std::shared_ptr<const void>>& objects) {
  if constexpr (is_device_array_argument<Arg>) {
    if (auto owner = arg.owner()) objects.push_back(std::move(owner));
  } else if constexpr (is_array_view_argument<Arg>) {
    keep_view_alive(launch, index, arg, objects);
  } else if constexpr (ListsKernelViews<Arg>) {
    std::apply([&](const auto&... view) { (keep_view_alive(launch, index, view, objects), ...); },
               arg.devmem_views());
  }
}

/// The memory of every array among `args` (DeviceArray, or ArrayView into memory devmem knows,
/// given directly or listed by a struct's devmem_views()), to keep alive while the kernel runs;
/// InvalidArgument for a view of a freed array.
template <class... Args, std::size_t... I>
std::vector<std::shared_ptr<const void>> launch_keep_alive(const PreparedLaunch& launch,
                                                           std::index_sequence<I...>,
                                                           const Args&... args) {
  std::vector<std::shared_ptr<const void>> objects;
  (keep_argument_alive(launch, I, args, objects), ...);
  return objects;
}

/// Converts every argument for its kernel parameter (with its index, for error messages).
template <class... Params, class... Args, std::size_t... I>
auto convert_kernel_arguments(const PreparedLaunch& launch, std::index_sequence<I...>,
                              Args&&... args) {
  return std::tuple<std::remove_cvref_t<Params>...>(
      KernelArgument<std::remove_cvref_t<Params>>::convert(launch, std::forward<Args>(args), I)...);
}

}  // namespace devmem::detail
