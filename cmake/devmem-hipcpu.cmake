# devmem_hipcpu_kernel_sources(<target> <cuda|roc> FILES <source>...): kernel sources
# (<devmem/kernel.hpp>) compiled by the host compiler against HIP-CPU, with the kernel layer of
# the given GPU backend, and added to <target>, which is linked to <runtime_target> (the interface
# target carrying HIP-CPU's headers, devmem's compatibility headers, TBB and threads).
#
# Used by devmem's own HIP-CPU builds (cpu_standins/hipcpu) and by devmem_add_kernel_sources for
# consumers of a HIP-CPU build of devmem (installed next to devmem-config.cmake).
include_guard(GLOBAL)

function(devmem_hipcpu_kernel_sources target backend runtime_target)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "" "FILES")
  if(backend STREQUAL "cuda")
    set(definition DEVMEM_HIPCPU_CUDA)
  elseif(backend STREQUAL "roc")
    set(definition DEVMEM_HIPCPU_ROC)
  else()
    message(FATAL_ERROR "devmem_hipcpu_kernel_sources: backend '${backend}' is not cuda or roc")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # HIP-CPU runs blocks on libstdc++'s parallel algorithms (TBB), as devmem itself was built.
    message(FATAL_ERROR "devmem_hipcpu_kernel_sources(${target}): kernels for devmem built "
                        "against HIP-CPU are compiled by g++; the compiler is "
                        "${CMAKE_CXX_COMPILER_ID}.")
  endif()
  # Each kernel source is compiled through a generated file that selects the GPU kernel layer, so
  # that other targets compiling the same source for the host backend are not affected.
  foreach(source IN LISTS arg_FILES)
    get_filename_component(path "${source}" ABSOLUTE)
    get_filename_component(name "${source}" NAME_WE)
    set(wrapper "${CMAKE_CURRENT_BINARY_DIR}/${target}_${name}.hipcpu.cpp")
    file(CONFIGURE OUTPUT "${wrapper}" CONTENT
         "// Generated: ${source} with the ${backend} kernel layer on HIP-CPU.\n#define ${definition} 1\n#include \"${path}\"\n"
         @ONLY)
    target_sources(${target} PRIVATE "${wrapper}")
    # Its #define must come first: no precompiled header of the target goes in front of it.
    set_source_files_properties("${wrapper}" TARGET_DIRECTORY ${target}
                                PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endforeach()
  target_link_libraries(${target} PRIVATE ${runtime_target})
endfunction()
