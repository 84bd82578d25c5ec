// Symbol visibility for libdevmem. The library is built with hidden visibility; only declarations
// marked DEVMEM_API are exported. Consumers of a static build define DEVMEM_STATIC.
#pragma once

#if defined(DEVMEM_STATIC)
#define DEVMEM_API
#elif defined(_WIN32)
#if defined(DEVMEM_BUILDING)
#define DEVMEM_API __declspec(dllexport)
#else
#define DEVMEM_API __declspec(dllimport)
#endif
#else
#define DEVMEM_API [[gnu::visibility("default")]]
#endif
