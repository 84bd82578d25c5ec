// The host backend's queued operation type (backends/host/host_stream.hpp): small trivially
// copyable callables live inline, the rest in a std::function; either way each runs exactly as
// given and releases what it captured when destroyed or reset.
#include "backends/host/host_stream.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

using devmem::host::StreamOperation;

TEST_CASE("stream operation: empty, inline and general callables", "[host_backend][stream]") {
  StreamOperation empty;
  CHECK_FALSE(empty);
  StreamOperation null = nullptr;
  CHECK_FALSE(null);

  // Pointers and a size, like a plain copy: stored inline, runs with its own values.
  std::array<std::byte, 16> from{};
  std::array<std::byte, 16> to{};
  from.fill(std::byte{7});
  StreamOperation copy = [dst = to.data(), src = from.data(), bytes = from.size()] {
    for (std::size_t i = 0; i < bytes; ++i) dst[i] = src[i];
  };
  REQUIRE(copy);
  StreamOperation moved = std::move(copy);
  moved();
  CHECK(to == from);

  // A capture that owns something: kept in a std::function, released when the operation is reset.
  auto owned = std::make_shared<int>(41);
  const std::weak_ptr<int> watch = owned;
  StreamOperation general = [value = std::move(owned)] { ++*value; };
  REQUIRE(general);
  general();
  CHECK(*watch.lock() == 42);
  general = nullptr;
  CHECK_FALSE(general);
  CHECK(watch.expired());
}

TEST_CASE("stream operation: a vector of operations runs each once, in order",
          "[host_backend][stream]") {
  std::vector<int> order;
  std::vector<StreamOperation> queue;
  for (int i = 0; i < 100; ++i) {
    if (i % 2 == 0) {
      queue.emplace_back([&order, i] { order.push_back(i); });  // inline
    } else {
      queue.emplace_back([&order, label = std::make_shared<int>(i)] { order.push_back(*label); });
    }
  }
  for (StreamOperation& op : queue) {
    op();
    op = nullptr;
  }
  REQUIRE(order.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
}
