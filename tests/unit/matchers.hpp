// Catch2 v2 has Message() for exact exception messages but no substring form; this adds one.
#pragma once

#include <catch2/catch.hpp>

#include <exception>
#include <string>
#include <utility>

namespace devmem_test {

class MessageContainsMatcher : public Catch::MatcherBase<std::exception> {
 public:
  explicit MessageContainsMatcher(std::string part) : part_(std::move(part)) {}
  bool match(const std::exception& e) const override {
    return std::string(e.what()).find(part_) != std::string::npos;
  }
  std::string describe() const override { return "message contains \"" + part_ + '"'; }

 private:
  std::string part_;
};

/// REQUIRE_THROWS_MATCHES(expr, Type, MessageContains("...")).
inline MessageContainsMatcher MessageContains(std::string part) {
  return MessageContainsMatcher(std::move(part));
}

}  // namespace devmem_test
