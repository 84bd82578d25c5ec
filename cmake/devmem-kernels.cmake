# devmem_add_kernel_sources(<target> FILES <source>...): compiles kernel sources (files that
# include <devmem/kernel.hpp> and call devmem::launch) with the compiler of the backend devmem was
# built for, and adds them to <target>:
#   - host-only devmem: the ordinary C++ compiler (.cu files too); kernels run in the simulator.
#   - CUDA devmem: nvcc, as CUDA sources (.cpp files too). The project must enable the CUDA
#     language first (project(... CUDA) or enable_language(CUDA)); DEVMEM_KERNEL_BACKEND (cuda)
#     and DEVMEM_KERNEL_HIPCPU (false) say whether it has to. Architectures: the target's CUDA_ARCHITECTURES, from
#     CMAKE_CUDA_ARCHITECTURES, which devmem-config.cmake sets to devmem's own when the project has
#     not set it before find_package(devmem) (and enables CUDA after it).
#   - ROC devmem: hipcc (the same found when devmem was built), into objects linked into <target>
#     with the HIP runtime. Architectures: CMAKE_HIP_ARCHITECTURES when set, otherwise those devmem
#     was built with (devmem::launch refuses a GPU the kernel has no code for, naming both).
#   - devmem built against HIP-CPU (presets cuda-hipcpu, roc-hipcpu): g++, with that GPU backend's
#     kernel layer on HIP-CPU (devmem::hipcpu_runtime: the HIP-CPU checkout devmem was built
#     with, TBB); kernels run on the CPU through the GPU backend's code.
# <target> must link devmem::devmem (this function does it, PRIVATE, when it does not yet).
# With -DDEVMEM_KERNEL_GPU_COMPILE_CHECK=AUTO or ON (devmem-kernel-gpu-check.cmake), the sources
# are also compiled device-only by nvcc (sm_80, sm_90) and hipcc (gfx90a) when found, in the
# target <target>_gpu_check: a kernel tested in the simulator is known to build for the GPUs. The
# compiler of devmem's own GPU backend is left out (it compiles the sources for real).
# Errors: FATAL_ERROR for a missing target or file list, a CUDA build without the CUDA language
# enabled, and a HIP-CPU build of devmem with a compiler other than g++.
#
# Read by devmem-config.cmake (install and build trees) and by devmem's own CMakeLists.txt (as a
# subproject), after DEVMEM_KERNEL_* are set; the settings are kept in global properties so that
# the function sees them from any directory.
include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/devmem-hipcc.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/devmem-hipcpu.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/devmem-kernel-gpu-check.cmake")

set_property(GLOBAL PROPERTY DEVMEM_KERNEL_BACKEND "${DEVMEM_KERNEL_BACKEND}")
set_property(GLOBAL PROPERTY DEVMEM_KERNEL_HIPCPU "${DEVMEM_KERNEL_HIPCPU}")
set_property(GLOBAL PROPERTY DEVMEM_KERNEL_CUDA_ARCHITECTURES "${DEVMEM_KERNEL_CUDA_ARCHITECTURES}")
set_property(GLOBAL PROPERTY DEVMEM_KERNEL_HIP_ARCHITECTURES "${DEVMEM_KERNEL_HIP_ARCHITECTURES}")
set_property(GLOBAL PROPERTY DEVMEM_KERNEL_HIPCC "${DEVMEM_KERNEL_HIPCC}")
set_property(GLOBAL PROPERTY DEVMEM_KERNEL_HIP_LIBRARY "${DEVMEM_KERNEL_HIP_LIBRARY}")

function(devmem_add_kernel_sources target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "FILES")
  if(NOT TARGET ${target})
    message(FATAL_ERROR "devmem_add_kernel_sources: '${target}' is not a target")
  endif()
  if(NOT arg_FILES)
    message(FATAL_ERROR "devmem_add_kernel_sources(${target}): no FILES given")
  endif()
  get_property(backend GLOBAL PROPERTY DEVMEM_KERNEL_BACKEND)
  get_property(hipcpu GLOBAL PROPERTY DEVMEM_KERNEL_HIPCPU)

  get_target_property(linked ${target} LINK_LIBRARIES)
  if(NOT linked OR NOT "devmem::devmem" IN_LIST linked)
    target_link_libraries(${target} PRIVATE devmem::devmem)
  endif()

  set(files "")
  foreach(source IN LISTS arg_FILES)
    get_filename_component(path "${source}" ABSOLUTE)
    list(APPEND files "${path}")
  endforeach()

  if(hipcpu)
    devmem_hipcpu_kernel_sources(${target} ${backend} devmem::hipcpu_runtime FILES ${files})
    target_compile_features(${target} PRIVATE cxx_std_20)
  elseif(backend STREQUAL "cuda")
    if(NOT CMAKE_CUDA_COMPILER_LOADED)
      message(FATAL_ERROR
        "devmem_add_kernel_sources(${target}): devmem was built with the CUDA backend, so kernel "
        "sources are compiled by nvcc: enable the CUDA language first (project(<name> CXX CUDA) "
        "or enable_language(CUDA)).")
    endif()
    target_sources(${target} PRIVATE ${files})
    set_source_files_properties(${files} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CUDA)
    # The shared cudart, the runtime instance libdevmem uses (one current device, one last
    # error); a static one would also work (the kernel layer selects the device in its own
    # runtime before each launch).
    set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
    # -std=c++20 on the target itself: devmem::devmem asks for C++20, which reaches CUDA sources
    # as CUDA20, a dialect CMake 3.25 has no nvcc flag for, so it adds none and nvcc compiles
    # C++17. A variable set for the caller instead would end with the caller's scope, which is a
    # function's when a project wraps this call in one (issue 34, d1). nvcc takes a repeated
    # -std=c++20 silently, so a CMake that adds its own is harmless.
    # --expt-relaxed-constexpr: kernels call constexpr standard functions (std::plus<>,
    # std::numeric_limits, std::min), which nvcc refuses in device code without it.
    target_compile_options(${target} PRIVATE
                           "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20;--expt-relaxed-constexpr>")
  elseif(backend STREQUAL "roc")
    get_property(hipcc GLOBAL PROPERTY DEVMEM_KERNEL_HIPCC)
    get_property(hip_library GLOBAL PROPERTY DEVMEM_KERNEL_HIP_LIBRARY)
    set(archs "${CMAKE_HIP_ARCHITECTURES}")
    if(NOT archs)
      get_property(archs GLOBAL PROPERTY DEVMEM_KERNEL_HIP_ARCHITECTURES)
    endif()
    set(offload "")
    foreach(arch IN LISTS archs)
      list(APPEND offload "--offload-arch=${arch}")
    endforeach()
    string(REPLACE ";" "," arch_list "${archs}")
    devmem_hipcc_objects(${target} HIPCC "${hipcc}" OFFLOAD ${offload} ARCH_LIST "${arch_list}"
                         INCLUDES "$<TARGET_PROPERTY:devmem::devmem,INTERFACE_INCLUDE_DIRECTORIES>"
                         FILES ${files})
    target_link_libraries(${target} PRIVATE "${hip_library}")
  else()
    # Host-only devmem: every kernel source is C++ for the simulator, .cu files included.
    target_sources(${target} PRIVATE ${files})
    set_source_files_properties(${files} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CXX)
    target_compile_features(${target} PRIVATE cxx_std_20)
  endif()

  set(skip "")
  if(NOT hipcpu AND backend STREQUAL "cuda")
    set(skip SKIP_NVCC)
  elseif(NOT hipcpu AND backend STREQUAL "roc")
    set(skip SKIP_HIPCC)
  endif()
  devmem_kernel_gpu_compile_check(${target} TARGET ${target} FILES ${files} ${skip})
endfunction()
