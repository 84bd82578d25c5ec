// How core/ reports an error it cannot throw: one function, so that every destructor and
// background release writes to the same place in the same form. Defined in core/context.cpp. Not
// installed; only core/ includes it.
#pragma once

#include <string_view>

namespace devmem::detail {

/// Writes an error that cannot be thrown (destructors, background release) to stderr.
void report_error(std::string_view what) noexcept;

}  // namespace devmem::detail
