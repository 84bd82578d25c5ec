// The consumer's kernel wrapper, callable from code the ordinary C++ compiler builds.
#pragma once

#include <devmem/devmem.hpp>

/// x *= factor on the device; counts the elements scaled into touched[0].
void scale(const devmem::DeviceArray& x, float factor, const devmem::DeviceArray& touched);
