// Compatibility header: the host backend's controls moved to <devmem/host_controls.hpp>, named
// for what they are. Include that instead; this header stays for existing code.
#pragma once

#include <devmem/host_controls.hpp>
