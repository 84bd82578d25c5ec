// Compiles without a warning under -Wall -Wextra -Werror: the names that replaced the deprecated
// ones (docs/migration.md), the option-struct forms of to_device and mapped_array, and the
// positional calls that must keep their meaning beside them (to_device(x, {}) is the default
// stream; mapped_array(shape, dtype, {}) and {8, 4} are strides). Declaring deprecated names in the
// headers warns about nothing: only a use does (deprecated_names.cpp).
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <cstdint>
#include <vector>

std::int64_t use(const devmem::Layout& layout, const devmem::ArrayView<float, 2>& view,
                 const devmem::HostArray& host, const devmem::Stream& s) {
  const std::vector<double> values(4);
  const devmem::DeviceArray a = devmem::to_device(host, {.stream = s, .copy = false});
  const devmem::DeviceArray b = devmem::to_device(values, devmem::ToDeviceOptions{.to = &a});
  const devmem::DeviceRecord<double> r = devmem::to_device(1.0, {.stream = s});
  const devmem::DeviceArray c = devmem::to_device(host, {});
  const devmem::DeviceArray d = devmem::to_device(values, {});
  const devmem::DeviceRecord<double> e = devmem::to_device(2.0, {});
  const devmem::DeviceArray f = devmem::to_device(host, s, false, &a);
  const devmem::MappedArray m = devmem::mapped_array(
      {2, 3}, devmem::dtype_of<float>(), {.order = devmem::Order::F, .portable = true, .wc = true});
  const devmem::MappedArray n = devmem::mapped_array({2, 3}, devmem::dtype_of<float>(), {});
  const devmem::MappedArray o = devmem::mapped_array<float>({2}, {.stream = s});
  const devmem::MappedArray p =
      devmem::mapped_array({2}, devmem::dtype_of<float>(), devmem::MappedArrayOptions{.wc = true});
  const devmem::MappedArray q = devmem::mapped_array({2, 2}, devmem::dtype_of<float>(), {8, 4});
  return layout.byte_extent().bytes() + view.stride_bytes(0) + view.extent(1) + b.size() +
         static_cast<std::int64_t>(r.data() != e.data()) + c.size() + d.size() + f.size() +
         m.size() + n.size() + o.size() + p.size() + q.size();
}
