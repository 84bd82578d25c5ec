// mapped_array with a designated list of flags only. clang chooses the MappedArrayOptions
// overload. g++ 12 ignores the designators when it tries the list against the positional form's
// Strides parameter, which makes the call ambiguous: an error, never the positional form with
// strides made of the flags (what a template MappedArrayOptions overload let g++ 12 do silently).
#include <devmem/devmem.hpp>

devmem::MappedArray flags(bool portable, bool wc) {
  return devmem::mapped_array({2}, devmem::dtype_of<float>(), {.portable = portable, .wc = wc});
}
