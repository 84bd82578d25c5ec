// The umbrella header: the whole host-side devmem API.
#pragma once

#include <devmem/array_base.hpp>
#include <devmem/backend.hpp>
#include <devmem/byte_size.hpp>
#include <devmem/config.hpp>
#include <devmem/context.hpp>
#include <devmem/device_array.hpp>
#include <devmem/dtype.hpp>
#include <devmem/error.hpp>
#include <devmem/host_array.hpp>
#include <devmem/interop.hpp>
#include <devmem/ipc.hpp>
#include <devmem/layout.hpp>
#include <devmem/managed.hpp>
#include <devmem/memory.hpp>
#include <devmem/memory_adaptors.hpp>
#include <devmem/memory_manager.hpp>
#include <devmem/smart_array.hpp>
#include <devmem/stream.hpp>
#include <devmem/trace.hpp>
#include <devmem/version.hpp>
