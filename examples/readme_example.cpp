// The example shown in README.md, built and run as a test so the README stays true.
#include <array>
#include <devmem/devmem.hpp>
#include <numeric>
#include <span>
#include <vector>

int main() {
  std::vector<double> values(12);
  std::iota(values.begin(), values.end(), 0.0);

  devmem::Stream s = devmem::stream();  // asynchronous queue
  devmem::DeviceArray a = devmem::to_device(values, s).reshape({3, 4});
  devmem::DeviceArray column = a.slice(1, 1, 2);  // a[:, 1:2], a view
  column.fill(-1.0);                              // only those elements change
  devmem::HostArray pinned = devmem::pinned_array<double>({4, 3});
  a.transpose().copy_to_host(pinned);  // strided copy, on s
  s.synchronize();

  double x = pinned.at<double>(1, 2);  // a[2, 1] == -1

  std::array<double, 12> back{};
  a.copy_to_host(back);                         // any contiguous range: vector,
  a.copy_to_device(std::span<double>(values));  // std::array, span (const or not)
  return x == -1.0 ? 0 : 1;
}
