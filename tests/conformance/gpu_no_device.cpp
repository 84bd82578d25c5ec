// gpu_no_device_<backend>: runs on every machine, with or without a GPU (it is not behind the skip
// of the conformance suite's main.cpp), and checks that the GPU backend reports what it finds:
// - without a device: device_count() is 0, no_device_reason() gives the vendor's words, every
//   path that needs a device (current_context, the backend's own methods, the public API) throws
//   NoDevice naming that reason, and asking again is stable (no crash, nothing cached wrongly);
// - with a device: device_count() > 0, no reason, and every device has properties.
// Exit code 0 when every check passes, 1 otherwise; each check is printed.
#include <devmem/devmem.hpp>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++g_failures;
}

/// Runs `fn`, which must throw devmem::NoDevice with a message containing `reason`.
void expect_no_device(const char* what, const std::string& reason,
                      const std::function<void()>& fn) {
  try {
    fn();
    check(false, std::string(what) + " throws NoDevice (it returned)");
  } catch (const devmem::NoDevice& e) {
    const std::string message = e.what();
    check(message.find(reason) != std::string::npos,
          std::string(what) + " throws NoDevice naming the reason: " + message);
  } catch (const std::exception& e) {
    check(false, std::string(what) + " throws NoDevice, not: " + e.what());
  }
}

void check_without_device(devmem::Backend& backend) {
  const std::string reason = backend.no_device_reason();
  std::printf("backend '%s' has no device: %s\n", DEVMEM_GPU_BACKEND, reason.c_str());
  check(!reason.empty(), "no_device_reason() is not empty");
  check(backend.device_count() == 0, "device_count() stays 0 when asked again");
  check(backend.no_device_reason() == reason, "no_device_reason() is stable");

  expect_no_device("current_context()", reason, [] { (void)devmem::current_context(); });
  expect_no_device("current_context() again", reason, [] { (void)devmem::current_context(); });
  expect_no_device("device_array()", reason,
                   [] { (void)devmem::device_array(devmem::Shape{4}, devmem::dtype_of<float>()); });
  expect_no_device("stream()", reason, [] { (void)devmem::stream(); });
  expect_no_device("Backend::properties(0)", reason, [&backend] { (void)backend.properties(0); });
  expect_no_device("Backend::memory_info(0)", reason, [&backend] { (void)backend.memory_info(0); });
  expect_no_device("Backend::allocate(0, 64)", reason,
                   [&backend] { (void)backend.allocate(0, 64); });
  expect_no_device("Backend::create_stream(0)", reason,
                   [&backend] { (void)backend.create_stream(0); });
  expect_no_device("Backend::create_event(0)", reason,
                   [&backend] { (void)backend.create_event(0); });
  expect_no_device("Backend::host_allocate(0, 64)", reason, [&backend] {
    (void)backend.host_allocate(0, 64, devmem::HostAllocFlags::Mapped);
  });
  int local = 0;
  expect_no_device("Backend::host_register(0, ...)", reason, [&backend, &local] {
    backend.host_register(0, &local, sizeof local, devmem::HostRegisterFlags::Mapped);
  });
  expect_no_device("Backend::launch_host_function(0, ...)", reason,
                   [&backend] { backend.launch_host_function(0, nullptr, [] {}); });
}

void check_with_device(devmem::Backend& backend, int count) {
  std::printf("backend '%s' has %d device%s\n", DEVMEM_GPU_BACKEND, count, count == 1 ? "" : "s");
  check(count > 0, "device_count() > 0");
  check(backend.no_device_reason().empty(), "no_device_reason() is empty");
  for (int device = 0; device < count; ++device) {
    try {
      const devmem::DeviceProperties p = backend.properties(device);
      std::printf("device %d: %s (%s), %lld bytes\n", device, p.name.c_str(),
                  p.architecture.c_str(), static_cast<long long>(p.total_memory));
      check(!p.name.empty() && !p.architecture.empty() && p.total_memory > 0,
            "device " + std::to_string(device) + " has a name, an architecture and memory");
    } catch (const std::exception& e) {
      check(false, "properties of device " + std::to_string(device) + ": " + e.what());
    }
  }
  try {
    check(devmem::current_context() != nullptr, "current_context() exists");
  } catch (const std::exception& e) {
    check(false, std::string("current_context(): ") + e.what());
  }
}

}  // namespace

int main() {
  try {
    devmem::select_backend(DEVMEM_GPU_BACKEND);
    check(devmem::backend_name() == DEVMEM_GPU_BACKEND,
          std::string("backend_name() is '") + DEVMEM_GPU_BACKEND + "'");
    devmem::Backend& backend = devmem::active_backend();
    const int count = devmem::device_count();
    check(count == backend.device_count(), "devmem::device_count() is the backend's count");
    if (count == 0) {
      check_without_device(backend);
    } else {
      check_with_device(backend, count);
    }
  } catch (const std::exception& e) {
    check(false, std::string("unexpected exception: ") + e.what());
  }
  std::printf("gpu_no_device_%s: %s\n", DEVMEM_GPU_BACKEND, g_failures == 0 ? "passed" : "FAILED");
  return g_failures == 0 ? 0 : 1;
}
