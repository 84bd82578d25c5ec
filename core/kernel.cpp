// The backend-neutral part of devmem::launch (<devmem/kernel.hpp>): the checks every backend makes
// before a kernel is enqueued, so that a bad launch is the same clear InvalidArgument everywhere
// (the vendors report some of these only as an asynchronous "invalid configuration").
#include "core/architectures.hpp"
#include "core/array_memory.hpp"
#include "core/context_state.hpp"
#include "core/stream_state.hpp"
#include "core/trace.hpp"

#include <devmem/context.hpp>
#include <devmem/error.hpp>
#include <devmem/kernel.hpp>

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace devmem::detail {
namespace {

std::string describe(const Dim3& d) {
  return fmt::format("({}, {}, {})", d.x, d.y, d.z);
}

void check_dims(std::string_view kernel, const char* what, const Dim3& dims,
                const std::array<std::int64_t, 3>& limits, const DeviceProperties& props,
                int device) {
  for (int d = 0; d < 3; ++d) {
    if (dims[d] == 0) {
      throw InvalidArgument(fmt::format("devmem::launch({}): {} {} has an empty dimension", kernel,
                                        what, describe(dims)));
    }
    if (static_cast<std::int64_t>(dims[d]) > limits[static_cast<std::size_t>(d)]) {
      throw InvalidArgument(fmt::format(
          "devmem::launch({}): {} {} exceeds the limit of device {} ({}): at most ({}, {}, {})",
          kernel, what, describe(dims), device, props.name, limits[0], limits[1], limits[2]));
    }
  }
}

}  // namespace

PreparedLaunch launch_prepare(const LaunchConfig& config, std::string_view compiled_for,
                              std::string_view kernel_name,
                              std::string_view compiled_architectures) {
  const std::string active = backend_name();
  if (active != compiled_for) {
    throw InvalidArgument(fmt::format(
        "devmem::launch({}): the kernel was compiled for the '{}' backend but the active backend "
        "is '{}' (compile the kernel source for it, or set DEVMEM_BACKEND={})",
        kernel_name, compiled_for, active, compiled_for));
  }
  Stream stream = config.stream.is_specified() ? config.stream : default_stream();
  const std::shared_ptr<Context> context = stream.context();
  const int device = context->device();
  const DeviceProperties& props = detail::ContextState::of(*context).properties();
  // The operation's name is formatted only when the launch is refused (launches are a hot path).
  if (stream.is_default() && context->backend().is_capturing(device, nullptr)) {
    refuse_default_stream_during_capture(fmt::format("devmem::launch({})", kernel_name).c_str(),
                                         *context);
  }

  const std::array<std::int64_t, 3> block_limits{props.max_block_dim[0], props.max_block_dim[1],
                                                 props.max_block_dim[2]};
  check_dims(kernel_name, "grid", config.grid, props.max_grid_dim, props, device);
  check_dims(kernel_name, "block", config.block, block_limits, props, device);
  if (config.block.volume() > static_cast<std::uint64_t>(props.max_threads_per_block)) {
    throw InvalidArgument(fmt::format(
        "devmem::launch({}): block {} has {} threads; device {} ({}) allows at most {} per block",
        kernel_name, describe(config.block), config.block.volume(), device, props.name,
        props.max_threads_per_block));
  }
  if (static_cast<std::int64_t>(config.shared_bytes) > props.max_shared_memory_per_block_optin) {
    throw InvalidArgument(fmt::format(
        "devmem::launch({}): {} bytes of dynamic shared memory requested; device {} ({}) allows "
        "at most {} bytes per block (the opt-in limit; {} without it)",
        kernel_name, config.shared_bytes, device, props.name,
        props.max_shared_memory_per_block_optin, props.max_shared_memory_per_block));
  }
  if (active == "roc") {
    // An AMD dispatch packet holds the grid's size in work-items, grid * block per dimension, in
    // 32 bits: HIP refuses (or, in some versions, truncates) anything larger.
    for (int d = 0; d < 3; ++d) {
      const std::uint64_t items = std::uint64_t{config.grid[d]} * config.block[d];
      if (items > std::numeric_limits<std::uint32_t>::max()) {
        throw InvalidArgument(fmt::format(
            "devmem::launch({}): grid {} of blocks {} has {} threads along axis {}; AMD GPUs "
            "dispatch at most 2^32 - 1 = {} per axis (grid * block)",
            kernel_name, describe(config.grid), describe(config.block), items, d,
            std::numeric_limits<std::uint32_t>::max()));
      }
    }
  }
  if (!compiled_architectures.empty() &&
      !has_code_for(compiled_architectures, props.architecture)) {
    throw InvalidArgument(fmt::format(
        "devmem::launch({}): the kernel has no code for device {} ({}, {}): it was compiled for "
        "{}; rebuild with the device's architecture in CMAKE_HIP_ARCHITECTURES (e.g. "
        "-DCMAKE_HIP_ARCHITECTURES=\"{};{}\", with a HIP that can target it)",
        kernel_name, device, props.name, props.architecture, compiled_architectures,
        compiled_architectures, props.architecture));
  }
  if (trace::active()) {
    trace::instant("launch", kernel_name,
                   {{"grid", std::string_view(describe(config.grid))},
                    {"block", std::string_view(describe(config.block))},
                    {"shared bytes", static_cast<std::int64_t>(config.shared_bytes)},
                    {"device", std::int64_t{device}},
                    {"stream", static_cast<const void*>(stream.native_handle())}});
  }
  // The device is made current by the launch itself, in the kernel's own runtime, and only for
  // the launch (detail::KernelDevice): the application's current device is left as it was.
  return PreparedLaunch{std::move(stream), device, std::string(kernel_name),
                        static_cast<std::size_t>(props.max_shared_memory_per_block),
                        static_cast<std::size_t>(props.max_shared_memory_per_block_optin)};
}

void check_shared_memory_total(const PreparedLaunch& launch, std::size_t static_bytes,
                               std::size_t dynamic_bytes) {
  if (static_bytes + dynamic_bytes <= launch.opt_in_shared_limit) return;
  throw InvalidArgument(fmt::format(
      "devmem::launch({}): the kernel's {} bytes of static shared memory and {} bytes of dynamic "
      "shared memory requested ({} in all); device {} allows at most {} bytes per block (the "
      "opt-in limit, static and dynamic together)",
      launch.kernel_name, static_bytes, dynamic_bytes, static_bytes + dynamic_bytes, launch.device,
      launch.opt_in_shared_limit));
}

void launch_check_array(const PreparedLaunch& launch, const DeviceArray& array,
                        std::size_t argument_index) {
  const std::shared_ptr<Context> array_context = array.context();
  if (array_context && array_context->device() != launch.device) {
    throw InvalidArgument(
        fmt::format("devmem::launch({}): argument {} is an array on device {}, but the kernel runs "
                    "on device {}",
                    launch.kernel_name, argument_index, array_context->device(), launch.device));
  }
}

void throw_argument_error(const PreparedLaunch& launch, std::size_t index, std::string_view what) {
  throw InvalidArgument(
      fmt::format("devmem::launch({}): argument {}: {}", launch.kernel_name, index, what));
}

namespace {

/// The function name in a demangled symbol: "saxpy" from "saxpy(long, float)", "ns::k<float>" from
/// "void ns::k<float>(float*)" (templates carry their return type); unnamed namespaces dropped, as
/// kernel_name_in_signature drops them.
std::string function_name(std::string name) {
  for (const std::string_view unnamed :
       {std::string_view("(anonymous namespace)::"), std::string_view("{anonymous}::")}) {
    for (std::size_t at = name.find(unnamed); at != std::string::npos; at = name.find(unnamed)) {
      name.erase(at, unnamed.size());
    }
  }
  // nvcc names an unnamed namespace per file: "_GLOBAL__N__<hash>_<length>_<file>_<hash>::".
  for (std::size_t at = name.find("_GLOBAL__N__"); at != std::string::npos;
       at = name.find("_GLOBAL__N__")) {
    const std::size_t end = name.find("::", at);
    if (end == std::string::npos) break;
    name.erase(at, end + 2 - at);
  }
  int depth = 0;  // inside <...>, where spaces and parentheses belong to the name
  std::size_t start = 0;
  for (std::size_t i = 0; i != name.size(); ++i) {
    const char c = name[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (depth != 0) continue;
    if (c == ' ') start = i + 1;  // after a return type
    if (c == '(') return name.substr(start, i - start);
  }
  return name.substr(start);
}

std::string demangled_function_name(const char* symbol) {
  int status = -1;
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(symbol, nullptr, nullptr, &status), &std::free);
  return function_name(status == 0 && demangled ? demangled.get() : symbol);
}

#if defined(__linux__) && defined(__LP64__)
/// The loaded object that holds `address`: its file and load bias (what its symbols' values are
/// relative to; 0 for a non-PIE executable).
struct LoadedObject {
  std::string path;
  std::uintptr_t bias = 0;
};
std::optional<LoadedObject> object_holding(const void* address) {
  struct Search {
    std::uintptr_t address;
    std::optional<LoadedObject> found;
  } search{reinterpret_cast<std::uintptr_t>(address), std::nullopt};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i != info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const std::uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
          if (s->address >= begin && s->address < begin + ph.p_memsz) {
            // The main program has an empty name here: its file is /proc/self/exe.
            const bool main_program = info->dlpi_name == nullptr || info->dlpi_name[0] == '\0';
            s->found =
                LoadedObject{main_program ? "/proc/self/exe" : info->dlpi_name, info->dlpi_addr};
            return 1;
          }
        }
        return 0;
      },
      &search);
  return search.found;
}

/// The function symbol whose value is `offset` in the symbol table `table` (names in `names`) of
/// the ELF image `bytes` of `size` bytes; empty when there is none. Every offset is checked
/// against the image, so that a corrupt file cannot make it read past the end.
std::string function_symbol_in_table(const unsigned char* bytes, std::size_t size,
                                     const ElfW(Shdr) & table, const ElfW(Shdr) & names,
                                     std::uintptr_t offset) {
  if (table.sh_offset + table.sh_size > size || names.sh_offset + names.sh_size > size) return {};
  const auto* symbols = reinterpret_cast<const ElfW(Sym)*>(bytes + table.sh_offset);
  const std::size_t count = table.sh_size / sizeof(ElfW(Sym));
  for (std::size_t k = 0; k != count; ++k) {
    const ElfW(Sym)& sym = symbols[k];
    if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_value != offset ||
        sym.st_name >= names.sh_size) {
      continue;
    }
    const char* name = reinterpret_cast<const char*>(bytes + names.sh_offset + sym.st_name);
    if (std::memchr(name, '\0', names.sh_size - sym.st_name) != nullptr) return name;
  }
  return {};
}

/// The function symbol whose value is `offset` in the static symbol tables (SHT_SYMTAB) of the
/// ELF image `bytes` of `size` bytes; empty when it has none (a stripped file) or none matches.
std::string function_symbol_in(const unsigned char* bytes, std::size_t size,
                               std::uintptr_t offset) {
  const auto* header = reinterpret_cast<const ElfW(Ehdr)*>(bytes);
  const bool valid = std::equal(header->e_ident, header->e_ident + SELFMAG, ELFMAG) &&
                     header->e_ident[EI_CLASS] == ELFCLASS64 &&
                     header->e_shentsize == sizeof(ElfW(Shdr)) &&
                     header->e_shoff + std::size_t{header->e_shnum} * sizeof(ElfW(Shdr)) <= size;
  if (!valid) return {};
  const auto* sections = reinterpret_cast<const ElfW(Shdr)*>(bytes + header->e_shoff);
  for (std::size_t i = 0; i != header->e_shnum; ++i) {
    const ElfW(Shdr)& table = sections[i];
    if (table.sh_type != SHT_SYMTAB || table.sh_link >= header->e_shnum) continue;
    std::string name =
        function_symbol_in_table(bytes, size, table, sections[table.sh_link], offset);
    if (!name.empty()) return name;
  }
  return {};
}

/// The symbol of the function starting at `offset` (a value relative to the load bias) in the
/// static symbol table (.symtab) of the ELF file at `path`; empty when the file has none (it was
/// stripped) or no function starts there. The file is mapped, not read, and unmapped again.
std::string static_symbol_at(const std::string& path, std::uintptr_t offset) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  void* map = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(sizeof(ElfW(Ehdr)))) {
    map = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  }
  ::close(fd);
  if (map == MAP_FAILED) return {};
  const auto size = static_cast<std::size_t>(st.st_size);
  std::string found = function_symbol_in(static_cast<const unsigned char*>(map), size, offset);
  ::munmap(map, size);
  return found;
}
#endif

}  // namespace

std::string kernel_symbol_name(const void* kernel) {
  // Read once per kernel: the static symbol table is read from the file, and a program launches
  // the same kernels through pointers again and again.
  static std::mutex mutex;
  static std::unordered_map<const void*, std::string> names;
  {
    const std::lock_guard lock(mutex);
    if (const auto it = names.find(kernel); it != names.end()) return it->second;
  }
  std::string name;
  Dl_info info{};
  if (::dladdr(kernel, &info) != 0 && info.dli_sname != nullptr && info.dli_saddr == kernel) {
    name = demangled_function_name(info.dli_sname);
  }
#if defined(__linux__) && defined(__LP64__)
  // Not exported (an executable linked without -rdynamic, a function with internal linkage): the
  // static symbol table, which every binary that is not stripped keeps.
  if (name.empty()) {
    if (const auto object = object_holding(kernel)) {
      const std::string symbol =
          static_symbol_at(object->path, reinterpret_cast<std::uintptr_t>(kernel) - object->bias);
      if (!symbol.empty()) name = demangled_function_name(symbol.c_str());
    }
  }
#endif
  if (name.empty()) name = "kernel";
  const std::lock_guard lock(mutex);
  return names.emplace(kernel, std::move(name)).first->second;
}

int constant_memory_device(const Stream& stream) {
  // copy_to_constant makes it current for the copy only (detail::KernelDevice).
  return stream.context()->device();
}

std::shared_ptr<const void> launch_view_owner(const void* data) {
  return device_memory_owner(data);
}

void check_view_alive(const PreparedLaunch& launch, std::size_t argument, const void* data,
                      std::uint64_t generation, const std::int64_t* shape, std::size_t rank) {
  if (generation == 0 || allocation_alive(generation)) return;
  const std::shared_ptr<const void> owner = device_memory_owner(data);
  // The view's array is gone. Its address alone cannot tell (the pool hands the same block out
  // again, the vendors reuse addresses): say whose memory it is now, if anyone's.
  const auto* now = static_cast<const DeviceMemory*>(owner.get());
  const std::string shape_text = rank == 1
                                     ? fmt::format("({},)", shape[0])
                                     : fmt::format("({})", fmt::join(shape, shape + rank, ", "));
  throw InvalidArgument(fmt::format(
      "devmem::launch({}): argument {} (an ArrayView of shape {} at {}) was made from an array "
      "whose memory has been freed (allocation {}); {}",
      launch.kernel_name, argument, shape_text, data, generation,
      now != nullptr && now->generation != 0
          ? fmt::format("that memory now belongs to another array (allocation {}), which the "
                        "kernel would overwrite",
                        now->generation)
          : std::string("the memory may be handed to another array at any time")));
}

void order_launch_after_allocations(const Stream& stream,
                                    const std::vector<std::shared_ptr<const void>>& memory) {
  const std::shared_ptr<StreamState>& state = StreamState::of(stream);
  if (!state) return;
  for (const auto& object : memory) {
    // launch_keep_alive collects DeviceArray::owner() and device_memory_owner(): DeviceMemory.
    order_after_allocation(*state, *static_cast<const DeviceMemory*>(object.get()));
  }
}

void keep_alive_until_complete(const Stream& stream,
                               std::vector<std::shared_ptr<const void>> objects) {
  if (objects.empty()) return;
  const std::shared_ptr<StreamState>& state = StreamState::of(stream);
  if (!state) throw InvalidArgument("keep_alive_until_complete: the stream is unspecified");
  detail::ContextState::of(*state->context).in_flight.retire_after(*state, std::move(objects));
}

void throw_launch_error(std::string_view backend, std::string_view function, int code,
                        std::string_view code_name, std::string_view description) {
  throw BackendError(
      std::string(backend), std::string(function), code, std::string(code_name),
      fmt::format("{} {}: {} ({}): {}", backend, function, code_name, code, description));
}

void check_constant_size(const char* operation, std::size_t capacity, std::size_t count) {
  if (count != capacity) {
    throw InvalidArgument(fmt::format(
        "{}: the constant array holds {} elements but {} values were given (they must match)",
        operation, capacity, count));
  }
}

void check_constant_shape(const char* operation, std::span<const std::size_t> extents,
                          const Shape& shape) {
  const bool same =
      shape.size() == extents.size() &&
      std::equal(extents.begin(), extents.end(), shape.begin(),
                 [](std::size_t extent, std::int64_t n) { return std::cmp_equal(extent, n); });
  if (!same) {
    // As Python writes a shape, "(15,)" for one axis, like the other messages of the kernel layer.
    const std::string given = shape.size() == 1 ? fmt::format("({},)", shape[0])
                                                : fmt::format("({})", fmt::join(shape, ", "));
    throw InvalidArgument(
        fmt::format("{}: the host array's shape {} is not the constant array's shape ({}) (they "
                    "must match)",
                    operation, given, fmt::join(extents, ", ")));
  }
}

}  // namespace devmem::detail
