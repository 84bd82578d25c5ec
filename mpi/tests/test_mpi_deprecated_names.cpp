// devmem::mpi's enumerators renamed by 0.1.0's API pass (docs/migration.md): the lower-case
// spellings are deprecated aliases of the new ones and still work. This file is the one place in
// devmem that uses them; the pragma below silences their warnings here, as a user would during
// the transition. Collective like every case of this program (every rank runs it in order).
#include <catch2/catch.hpp>

#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include "mpi_test_support.hpp"

#include <string>
#include <utility>
#include <vector>

// For g++ and clang alike.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace dm = devmem::mpi;

static_assert(dm::Transport::automatic == dm::Transport::Automatic);
static_assert(dm::Transport::device_direct == dm::Transport::DeviceDirect);
static_assert(dm::Transport::staged == dm::Transport::Staged);
static_assert(dm::ReduceOp::sum == dm::ReduceOp::Sum);
static_assert(dm::ReduceOp::min == dm::ReduceOp::Min);
static_assert(dm::ReduceOp::max == dm::ReduceOp::Max);
static_assert(dm::ReduceOp::prod == dm::ReduceOp::Prod);
static_assert(dm::ReduceOp::logical_and == dm::ReduceOp::LogicalAnd);
static_assert(dm::ReduceOp::logical_or == dm::ReduceOp::LogicalOr);
static_assert(dm::ReduceOp::logical_xor == dm::ReduceOp::LogicalXor);
static_assert(dm::ReduceOp::bitwise_and == dm::ReduceOp::BitwiseAnd);
static_assert(dm::ReduceOp::bitwise_or == dm::ReduceOp::BitwiseOr);
static_assert(dm::ReduceOp::bitwise_xor == dm::ReduceOp::BitwiseXor);
static_assert(dm::ReduceOp::minloc == dm::ReduceOp::MinLoc);
static_assert(dm::ReduceOp::maxloc == dm::ReduceOp::MaxLoc);

TEST_CASE("mpi: the deprecated enumerators name the same values", "[mpi][deprecated]") {
  // The names the environment variable, to_string and the Python module use are unchanged.
  const std::vector<std::pair<dm::Transport, std::string>> transports{
      {dm::Transport::automatic, "automatic"},
      {dm::Transport::device_direct, "device_direct"},
      {dm::Transport::staged, "staged"}};
  for (const auto& [old_name, text] : transports) {
    CHECK(dm::to_string(old_name) == text);
    CHECK(dm::parse_transport(text) == old_name);
  }
  const std::vector<std::pair<dm::ReduceOp, std::string>> ops{
      {dm::ReduceOp::sum, "sum"},
      {dm::ReduceOp::min, "min"},
      {dm::ReduceOp::max, "max"},
      {dm::ReduceOp::prod, "prod"},
      {dm::ReduceOp::logical_and, "logical_and"},
      {dm::ReduceOp::logical_or, "logical_or"},
      {dm::ReduceOp::logical_xor, "logical_xor"},
      {dm::ReduceOp::bitwise_and, "bitwise_and"},
      {dm::ReduceOp::bitwise_or, "bitwise_or"},
      {dm::ReduceOp::bitwise_xor, "bitwise_xor"},
      {dm::ReduceOp::minloc, "minloc"},
      {dm::ReduceOp::maxloc, "maxloc"}};
  for (const auto& [op, text] : ops) CHECK(dm::to_string(op) == text);

  // And the calls taking them do what the new names do.
  const mpi_test::Settings settings(dm::Transport::staged, std::int64_t{1} << 20);
  CHECK(dm::transport() == dm::Transport::Staged);
  const int n = mpi_test::size();
  const devmem::DeviceArray a = devmem::to_device(std::vector<double>{1.0, 2.0});
  dm::allreduce(a, dm::ReduceOp::sum);
  CHECK(a.to_vector<double>() == std::vector<double>{1.0 * n, 2.0 * n});
  const devmem::DeviceArray b = devmem::to_device(std::vector<double>{1.0 + mpi_test::rank()});
  dm::allreduce(b, dm::ReduceOp::max);
  CHECK(b.to_vector<double>() == std::vector<double>{static_cast<double>(n)});
}
