// IPC handles are input from another process, checksummed but not authenticated (issue 32): an
// allocation size and shape forged larger than the exporter's allocation (the reproducer
// ipc_forged_size.cpp, without MPI) are refused against what opening really mapped, naming both
// sizes and leaving nothing mapped or open; a host handle whose descriptor number names another
// file is refused before that file is opened; and the dtype description a handle carries
// (structured with offsets and alignment, big-endian, datetime units) comes back whole through
// to_bytes, from_bytes and an opening in another process, or is refused when it does not describe
// the array. The second process is this executable (ipc_test_support.hpp, test_ipc.cpp).
#include "ipc_test_support.hpp"
#include "support.hpp"

#include <devmem/ipc.hpp>

#include <array>
#include <cerrno>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/inotify.h>
#include <unistd.h>

using namespace conformance;
using namespace conformance::ipc_test;
using devmem::DeviceArray;
using devmem::DType;
using devmem::DTypeDescription;
using devmem::DTypeField;
using devmem::InvalidArgument;
using devmem::IpcHandle;

namespace {

void describe_fields(std::ostream& out, const std::vector<DTypeField>& fields) {
  for (const DTypeField& field : fields) {
    out << "(" << field.name << " @" << field.offset << " " << field.typestr << " shape";
    for (const std::int64_t n : field.shape) out << " " << n;
    describe_fields(out, field.fields);
    out << ")";
  }
}

/// The description as one line, written alike by both processes to compare them.
std::string describe(const DTypeDescription& description) {
  std::ostringstream out;
  out << description.typestr << " itemsize " << description.itemsize << " alignment "
      << description.alignment << " ";
  describe_fields(out, description.fields);
  return out.str();
}

/// A dtype and a description of it that DType alone cannot give.
struct Described {
  DType dtype;
  DTypeDescription description;
};

std::vector<Described> described_dtypes() {
  return {
      // NumPy's np.dtype([('id', '<i4'), ('pos', '<f8', (3,)), ('flags', [('ok', '?'),
      // ('code', '>u2')])], align=True), padded to 40 bytes: fields, offsets, a sub-array, a
      // nested structure with padding and a big-endian member.
      {DType::record(40, 8),
       {"|V40",
        40,
        8,
        {{"id", 0, "<i4", {}, {}},
         {"pos", 8, "<f8", {3}, {}},
         {"flags", 32, "|V4", {}, {{"ok", 0, "|b1", {}, {}}, {"code", 2, ">u2", {}, {}}}}}}},
      // Big-endian: DType says float64 only.
      {DType('f', 8, 8), {">f8", 8, 8, {}}},
      // A datetime with its unit: DType says 8 raw bytes only.
      {DType::record(8, 8), {"<M8[ns]", 8, 8, {}}},
      // Datetime and timedelta fields (one with a multiplier) and a 3-character unicode field.
      {DType::record(24, 8),
       {"|V24",
        24,
        8,
        {{"when", 0, "<M8[us]", {}, {}},
         {"span", 8, "<m8[10ms]", {}, {}},
         {"name", 12, "<U3", {}, {}}}}},
  };
}

}  // namespace

TEST_CASE("IPC: a handle whose allocation size is forged larger is refused naming both sizes",
          "[ipc]") {
  IPC_OR_RETURN();
  MemoryStateGuard guard;
  const DeviceArray array = devmem::device_array<float>({1000});
  array.fill(1.0F);
  array.stream().synchronize();
  const IpcHandle handle = array.ipc_handle();
  const std::vector<std::byte> good = handle.to_bytes();
  // The reproducer's forgery: 64 MiB over the exporter's 4,000 bytes, checksum recomputed.
  constexpr std::int64_t kForged = std::int64_t{64} << 20;
  const std::vector<std::byte> forged =
      patched(patched(good, allocation_at(good), kForged), shape_at(good), kForged / 4);
  const IpcHandle read = IpcHandle::from_bytes(forged);  // well-formed: only opening can tell
  CHECK(read.allocation_bytes() == kForged);
  CHECK(read.shape() == Shape{kForged / 4});
  const std::string real = std::to_string(handle.allocation_bytes());
  const ChildResult child =
      run_child("forged-size", {hex_of(forged), std::to_string(kForged), real, handle.to_hex()});
  INFO(child.output);
  CHECK(child.status == 0);
  if (on_host_backend()) {
    // The host vendor part forged to match (its size and pages): what bounds the array is then
    // the memfd's size, one page, not anything the handle says.
    const std::size_t vendor = vendor_at(good);
    std::vector<std::byte> both = patched(forged, vendor + 24, static_cast<std::uint64_t>(kForged));
    both = patched(both, vendor + 32, static_cast<std::uint64_t>(kForged));
    const ChildResult memfd =
        run_child("forged-size", {hex_of(both), std::to_string(kForged), "4096", handle.to_hex()});
    INFO(memfd.output);
    CHECK(memfd.status == 0);
  }
}

TEST_CASE("IPC (host): a descriptor number naming another file is refused before it is opened",
          "[ipc]") {
  IPC_OR_RETURN();
  if (!on_host_backend()) {
    SUCCEED("only the host backend's handles name a descriptor");
    return;
  }
  MemoryStateGuard guard;
  const DeviceArray array = devmem::device_array<float>({1000});
  const std::vector<std::byte> good = array.ipc_handle().to_bytes();
  const std::size_t fd_at = vendor_at(good) + 12;  // after the vendor magic and the pid
  // A regular file watched for opens (an open of it through /proc/<pid>/fd is seen there), and a
  // pipe, both open in this process, the exporter.
  char path[] = "/tmp/devmem-ipc-foreign-XXXXXX";
  const int file = ::mkstemp(path);
  REQUIRE(file >= 0);
  const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(watch >= 0);
  REQUIRE(::inotify_add_watch(watch, path, IN_OPEN) >= 0);
  int pipe_ends[2] = {-1, -1};
  REQUIRE(::pipe2(pipe_ends, O_CLOEXEC) == 0);
  // The texts travel on a shell command line: no quotes in them.
  const std::string exporter = " of process " + std::to_string(::getpid()) + " is";
  const ChildResult file_child =
      run_child("foreign-fd", {hex_of(patched(good, fd_at, std::int32_t{file})),
                               "descriptor " + std::to_string(file) + exporter, path});
  const ChildResult pipe_child =
      run_child("foreign-fd", {hex_of(patched(good, fd_at, std::int32_t{pipe_ends[0]})),
                               "descriptor " + std::to_string(pipe_ends[0]) + exporter, "pipe:["});
  std::array<char, 4096> events{};
  const ssize_t got = ::read(watch, events.data(), events.size());
  const int read_error = errno;
  ::close(watch);
  ::close(file);
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
  ::unlink(path);
  INFO(file_child.output);
  CHECK(file_child.status == 0);
  INFO(pipe_child.output);
  CHECK(pipe_child.status == 0);
  // Nobody opened the file: the refusal came from its link and its inode alone.
  CHECK(got < 0);
  CHECK(read_error == EAGAIN);
}

TEST_CASE("IPC: the dtype description travels with the handle: structured, big-endian, datetime",
          "[ipc]") {
  IPC_OR_RETURN();
  MemoryStateGuard guard;
  for (const Described& d : described_dtypes()) {
    INFO(describe(d.description));
    const DeviceArray array = devmem::device_array(Shape{4}, d.dtype);
    CHECK(devmem::ipc_handle(array).dtype_description() == DTypeDescription::of(d.dtype));
    const IpcHandle handle = devmem::ipc_handle(array, d.description);
    CHECK(handle.dtype_description() == d.description);
    const IpcHandle back = IpcHandle::from_bytes(handle.to_bytes());
    CHECK(back.dtype() == d.dtype);
    CHECK(back.dtype_description() == d.description);
    CHECK(back.to_bytes() == handle.to_bytes());
    // Opened in another process, which prints the description it read.
    const ChildResult child = run_child("description", {handle.to_hex()});
    INFO(child.output);
    CHECK(child.status == 0);
    CHECK(child.output.substr(0, child.output.find('\n')) == describe(d.description));
  }
}

TEST_CASE("IPC: a dtype description that does not describe the array is refused", "[ipc]") {
  IPC_OR_RETURN();
  MemoryStateGuard guard;
  const DeviceArray records = devmem::device_array(Shape{4}, DType::record(16, 8));
  const DeviceArray doubles = devmem::device_array<double>({4});
  const auto refused = [](const DeviceArray& array, const DTypeDescription& description,
                          const std::string& text) {
    INFO(describe(description));
    CHECK_THROWS_MATCHES(devmem::ipc_handle(array, description), InvalidArgument,
                         MessageContains("ipc_handle") && MessageContains(text));
  };
  const DTypeField f8{"a", 0, "<f8", {}, {}};
  refused(records, {"|V16", 16, 4, {}}, "(itemsize 16, alignment 8)");
  refused(records, {"|V8", 16, 8, {}}, "is not 16 bytes");
  refused(doubles, {"<i8", 8, 8, {}}, "only a record dtype");
  refused(doubles, {"|V8", 8, 8, {f8}}, "only a record dtype");
  refused(records, {"<f8", 16, 8, {}}, "typestr '<f8' is not 16 bytes");
  refused(records, {"<f3", 16, 8, {}},
          "'<f3' (the whole element) has a size its kind does not have");
  refused(records, {"|V16", 16, 8, {{"a", 12, "<f8", {}, {}}}},
          "field 'a' (8 bytes at offset 12) does not lie inside its 16-byte element");
  refused(records, {"|V16", 16, 8, {{"a", 0, "<f4", {2, 3}, {}}}}, "(24 bytes at offset 0)");
  refused(records, {"|V16", 16, 8, {{"a", 0, "|O8", {}, {}}}}, "Python objects");
  refused(records, {"|V16", 16, 8, {{"t", 0, "<M8[xs]", {}, {}}}}, "unknown datetime unit");
  refused(records, {"|V16", 16, 8, {{"t", 0, "<M4[ns]", {}, {}}}}, "size its kind does not have");
  refused(records, {"|V16", 16, 8, {f8, {"a", 8, "<f8", {}, {}}}}, "names field 'a' twice");
  refused(records, {"|V16", 16, 8, {{"", 0, "<f8", {}, {}}}}, "has no name");
  refused(records, {"|V16", 16, 8, {{"a", 0, "<f8", {}, {f8}}}}, "has fields but typestr '<f8'");
  refused(records, {"|V16", 16, 8, {{"s", 0, "|V8", {}, {{"b", 4, "<f8", {}, {}}}}}},
          "field 's.b' (8 bytes at offset 4) does not lie inside its 8-byte element");
  refused(records, {"|V16", 16, 8, {{"a", 0, "f8", {}, {}}}}, "is not a typestr");
  refused(records, {"|V16", 16, 8, {{"a", 0, "<f8x", {}, {}}}}, "characters after its size");

  // Forged descriptions in the bytes are refused when read. The field list follows the vendor
  // handle: count, then the first field's name (length, "a"), offset, ...
  const std::vector<std::byte> good = devmem::ipc_handle(records, {"|V16", 16, 8, {f8}}).to_bytes();
  const std::size_t count_at = good.size() - 8 - (4 + 2 + 8 + 4 + 4 + 4);
  CHECK(IpcHandle::from_bytes(good).dtype_description().fields == std::vector<DTypeField>{f8});
  CHECK_THROWS_MATCHES(IpcHandle::from_bytes(patched(good, count_at, std::uint32_t{100000})),
                       InvalidArgument, MessageContains("more than 4096 fields"));
  CHECK_THROWS_MATCHES(IpcHandle::from_bytes(patched(good, count_at, std::uint32_t{2})),
                       InvalidArgument, MessageContains("runs past its end"));
  CHECK_THROWS_MATCHES(IpcHandle::from_bytes(patched(good, count_at + 4 + 2, std::int64_t{12})),
                       InvalidArgument,
                       MessageContains("IpcHandle::from_bytes") &&
                           MessageContains("(8 bytes at offset 12) does not lie inside"));
}

// ---- The child side ----------------------------------------------------------------------------

namespace conformance {

namespace {

/// Runs `open` expecting InvalidArgument with every text of `expected` in its message, and checks
/// that it left nothing behind: no IPC mapping and (host backend, whose refusals happen before or
/// after its own descriptor use) no descriptor. Prints what went wrong; 0 when all is as expected.
template <class Open>
int expect_refusal_without_leaks(const Open& open, const std::vector<std::string>& expected) {
  // Made before counting: the backend's and the context's own resources are not a leak.
  static_cast<void>(devmem::device_array<float>({1}));
  const int descriptors = open_descriptors();
  const int mappings = ipc_mappings();
  try {
    static_cast<void>(open());
    std::fprintf(stderr, "ipc child: the handle was opened\n");
    return 1;
  } catch (const InvalidArgument& e) {
    std::printf("ipc child: refused as expected: %s\n", e.what());
    for (const std::string& text : expected) {
      if (std::string_view(e.what()).find(text) == std::string_view::npos) {
        std::fprintf(stderr, "ipc child: the refusal does not say '%s'\n", text.c_str());
        return 1;
      }
    }
  }
  if (ipc_mappings() != mappings) {
    std::fprintf(stderr, "ipc child: %d IPC mapping(s) left after the refusal\n",
                 ipc_mappings() - mappings);
    return 1;
  }
  if (devmem::backend_name() == "host" && open_descriptors() != descriptors) {
    std::fprintf(stderr, "ipc child: %d descriptor(s) before the refusal, %d after\n", descriptors,
                 open_descriptors());
    return 1;
  }
  return 0;
}

}  // namespace

int ipc_hardening_child(std::string_view mode, int argc, char** argv) {
  if (mode == "forged-size" && argc == 4) {
    // argv: the forged handle, its allocation size, the size really mapped, the genuine handle.
    const IpcHandle forged = IpcHandle::from_hex(argv[0]);
    const int refused = expect_refusal_without_leaks(
        [&] { return devmem::open_ipc_array(forged); },
        {"says the exported allocation has " + std::string(argv[1]) + " bytes",
         "mapped " + std::string(argv[2]) + " bytes"});
    if (refused != 0) return refused;
    // The genuine handle opens afterwards: the refused mapping left no stale entry.
    const DeviceArray array = devmem::open_ipc_array(IpcHandle::from_hex(argv[3]));
    if (array.size() != 1000 || array.item<float>(999) != 1.0F) {
      std::fprintf(stderr, "ipc child: the genuine handle does not show the exporter's array\n");
      return 1;
    }
    return 0;
  }
  if (mode == "foreign-fd" && argc == 3) {
    // argv: the handle, then texts the refusal must hold (the descriptor, what it names).
    const IpcHandle handle = IpcHandle::from_hex(argv[0]);
    return expect_refusal_without_leaks(
        [&] { return devmem::open_ipc_array(handle); },
        {argv[1], argv[2], "not the exporter's memfd", "it was not opened"});
  }
  if (mode == "description" && argc == 1) {
    const IpcHandle handle = IpcHandle::from_hex(argv[0]);
    const DeviceArray array = devmem::open_ipc_array(handle);
    std::printf("%s\n", describe(handle.dtype_description()).c_str());
    return array.size() == 4 ? 0 : 1;
  }
  return -1;
}

}  // namespace conformance
