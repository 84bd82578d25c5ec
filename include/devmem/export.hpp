// Symbol visibility for libdevmem and libdevmem_mpi. Both are shared libraries only (a static
// build is not offered: the exit handler, the backend registry and the host backend's thread-local
// runner must exist once per process), built with hidden visibility; only declarations marked
// DEVMEM_API (libdevmem) or DEVMEM_MPI_API (libdevmem_mpi) are exported. Each library's build
// defines its BUILDING macro, which matters only where exports and imports differ (Windows).
#pragma once

#if defined(_WIN32)
#define DEVMEM_DETAIL_DLL_EXPORT __declspec(dllexport)
#define DEVMEM_DETAIL_DLL_IMPORT __declspec(dllimport)
#else
#define DEVMEM_DETAIL_DLL_EXPORT [[gnu::visibility("default")]]
#define DEVMEM_DETAIL_DLL_IMPORT [[gnu::visibility("default")]]
#endif

#if defined(DEVMEM_BUILDING)
#define DEVMEM_API DEVMEM_DETAIL_DLL_EXPORT
#else
#define DEVMEM_API DEVMEM_DETAIL_DLL_IMPORT
#endif

#if defined(DEVMEM_MPI_BUILDING)
#define DEVMEM_MPI_API DEVMEM_DETAIL_DLL_EXPORT
#else
#define DEVMEM_MPI_API DEVMEM_DETAIL_DLL_IMPORT
#endif
