# The GPU compile check: kernel sources tested in the host backend's simulator are also compiled
# for GPU targets, device code only, so that a kernel known to work in the simulator is known to
# build for the GPUs too (issue 34: two ported Numba examples passed the simulator and then failed
# under nvcc). Nothing is linked or run.
#
# DEVMEM_KERNEL_GPU_COMPILE_CHECK (cache variable): OFF (the default), AUTO or ON.
#   - AUTO: with each of nvcc and hipcc that is found (nvcc in PATH or /usr/local/cuda/bin, hipcc
#     in PATH or /opt/rocm/bin); neither found is no check, said once at configure time.
#   - ON: the same, but neither found is a FATAL_ERROR.
#   DEVMEM_KERNEL_GPU_CHECK_NVCC and DEVMEM_KERNEL_GPU_CHECK_HIPCC (cache) name the compilers.
#   DEVMEM_KERNEL_GPU_CHECK_CUDA_ARCHITECTURES (default 80;90) and
#   DEVMEM_KERNEL_GPU_CHECK_HIP_ARCHITECTURES (default gfx90a) say what they compile for.
#
# devmem_kernel_gpu_compile_check(<name> FILES <source>... [TARGET <target>]
#                                 [INCLUDES <dir>...] [DEFINITIONS <name=value>...])
#   Adds the target <name>_gpu_check (built by `all`) that compiles each source as CUDA with nvcc
#   (`--fatbin`, every CUDA architecture) and as HIP with hipcc (`--cuda-device-only`, every HIP
#   architecture), with -std=c++20, --expt-relaxed-constexpr for nvcc, the INCLUDES and
#   DEFINITIONS, and TARGET's include directories and compile definitions (its own and those of
#   the libraries it links: devmem::devmem's headers). The outputs are device code only, in the
#   current binary directory; the host side of each source is the ordinary compiler's. Does nothing
#   when the check is off or no GPU compiler was found. SKIP_NVCC / SKIP_HIPCC leave one compiler
#   out (a CUDA build of devmem compiles its kernels with nvcc anyway, a ROC build with hipcc).
#   devmem_add_kernel_sources calls it for the consumer's kernel sources when the check is on.
#
# How long it takes (2-core VM, under load): nvcc about 12 s for a small kernel file and about 30 s
# for a kernel test file with Catch2; hipcc about 14 s and 17 s. docs/kernels.md has the numbers
# for devmem's own examples and kernel tests.
include_guard(GLOBAL)

set(DEVMEM_KERNEL_GPU_COMPILE_CHECK OFF CACHE STRING
    "Also compile kernel sources device-only with nvcc and hipcc when found: OFF, AUTO or ON")
set_property(CACHE DEVMEM_KERNEL_GPU_COMPILE_CHECK PROPERTY STRINGS OFF AUTO ON)
set(DEVMEM_KERNEL_GPU_CHECK_CUDA_ARCHITECTURES "80;90" CACHE STRING
    "CUDA architectures of the GPU compile check (sm_XX)")
set(DEVMEM_KERNEL_GPU_CHECK_HIP_ARCHITECTURES "gfx90a" CACHE STRING
    "HIP architectures of the GPU compile check")

# Sets DEVMEM_KERNEL_GPU_CHECK_NVCC / _HIPCC (cache, NOTFOUND when absent) once the check is on.
function(_devmem_kernel_gpu_check_compilers)
  string(TOUPPER "${DEVMEM_KERNEL_GPU_COMPILE_CHECK}" mode)
  if(NOT mode MATCHES "^(OFF|AUTO|ON)$")
    message(FATAL_ERROR
      "DEVMEM_KERNEL_GPU_COMPILE_CHECK is '${DEVMEM_KERNEL_GPU_COMPILE_CHECK}': use OFF, AUTO or ON")
  endif()
  if(mode STREQUAL "OFF")
    return()
  endif()
  find_program(DEVMEM_KERNEL_GPU_CHECK_NVCC nvcc HINTS /usr/local/cuda/bin
               DOC "nvcc for the GPU compile check")
  find_program(DEVMEM_KERNEL_GPU_CHECK_HIPCC hipcc HINTS /opt/rocm/bin
               DOC "hipcc for the GPU compile check")
  if(NOT DEVMEM_KERNEL_GPU_CHECK_NVCC AND NOT DEVMEM_KERNEL_GPU_CHECK_HIPCC)
    if(mode STREQUAL "ON")
      message(FATAL_ERROR "DEVMEM_KERNEL_GPU_COMPILE_CHECK is ON, but neither nvcc nor hipcc was "
                          "found: set DEVMEM_KERNEL_GPU_CHECK_NVCC or DEVMEM_KERNEL_GPU_CHECK_HIPCC, "
                          "or use AUTO")
    endif()
    get_property(said GLOBAL PROPERTY _DEVMEM_KERNEL_GPU_CHECK_SAID)
    if(NOT said)
      message(STATUS "devmem GPU compile check: neither nvcc nor hipcc found, kernel sources are "
                     "compiled for the simulator only")
      set_property(GLOBAL PROPERTY _DEVMEM_KERNEL_GPU_CHECK_SAID TRUE)
    endif()
  endif()
endfunction()

function(devmem_kernel_gpu_compile_check name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "SKIP_NVCC;SKIP_HIPCC" "TARGET"
                        "FILES;INCLUDES;DEFINITIONS")
  if(NOT arg_FILES)
    message(FATAL_ERROR "devmem_kernel_gpu_compile_check(${name}): no FILES given")
  endif()
  if(arg_TARGET AND NOT TARGET ${arg_TARGET})
    message(FATAL_ERROR "devmem_kernel_gpu_compile_check(${name}): '${arg_TARGET}' is not a target")
  endif()
  _devmem_kernel_gpu_check_compilers()
  string(TOUPPER "${DEVMEM_KERNEL_GPU_COMPILE_CHECK}" mode)
  if(mode STREQUAL "OFF")
    return()
  endif()

  set(includes ${arg_INCLUDES})
  set(definitions ${arg_DEFINITIONS})
  if(arg_TARGET)
    # Less /usr/include (Catch2's, for one): a -I of the system directory breaks the
    # #include_next of libstdc++'s C headers under hipcc (clang).
    list(APPEND includes
         "$<FILTER:$<TARGET_PROPERTY:${arg_TARGET},INCLUDE_DIRECTORIES>,EXCLUDE,^/usr/include/?$>")
    list(APPEND definitions "$<TARGET_PROPERTY:${arg_TARGET},COMPILE_DEFINITIONS>")
  endif()
  set(include_flags "$<$<BOOL:${includes}>:-I$<JOIN:${includes},;-I>>")
  set(definition_flags "$<$<BOOL:${definitions}>:-D$<JOIN:${definitions},;-D>>")

  set(compilers "")
  if(DEVMEM_KERNEL_GPU_CHECK_NVCC AND NOT arg_SKIP_NVCC)
    list(APPEND compilers nvcc)
  endif()
  if(DEVMEM_KERNEL_GPU_CHECK_HIPCC AND NOT arg_SKIP_HIPCC)
    list(APPEND compilers hipcc)
  endif()
  set(outputs "")
  file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/gpu_check")
  foreach(source IN LISTS arg_FILES)
    get_filename_component(path "${source}" ABSOLUTE)
    get_filename_component(stem "${path}" NAME_WE)
    # The path's hash keeps outputs of same-named sources from different folders apart.
    string(MD5 hash "${path}")
    string(SUBSTRING "${hash}" 0 8 hash)
    set(base "${CMAKE_CURRENT_BINARY_DIR}/gpu_check/${name}_${stem}_${hash}")
    foreach(compiler IN LISTS compilers)
      if(compiler STREQUAL "nvcc")
        set(output "${base}.fatbin")
        set(archs "${DEVMEM_KERNEL_GPU_CHECK_CUDA_ARCHITECTURES}")
        set(arch_flags "")
        foreach(arch IN LISTS archs)
          list(APPEND arch_flags -gencode "arch=compute_${arch},code=sm_${arch}")
        endforeach()
        set(command "${DEVMEM_KERNEL_GPU_CHECK_NVCC}" -x cu --fatbin ${arch_flags} -std=c++20
                    --expt-relaxed-constexpr)
      else()
        set(output "${base}.hip.o")
        set(archs "${DEVMEM_KERNEL_GPU_CHECK_HIP_ARCHITECTURES}")
        set(arch_flags "")
        foreach(arch IN LISTS archs)
          list(APPEND arch_flags "--offload-arch=${arch}")
        endforeach()
        set(command "${DEVMEM_KERNEL_GPU_CHECK_HIPCC}" -x hip ${arch_flags} --cuda-device-only
                    -std=c++20 -c)
      endif()
      string(REPLACE ";" "," arch_list "${archs}")
      add_custom_command(OUTPUT "${output}"
        COMMAND ${command} "${include_flags}" "${definition_flags}" -MD -MF "${output}.d"
                "${path}" -o "${output}"
        DEPENDS "${path}"
        DEPFILE "${output}.d"
        COMMAND_EXPAND_LISTS VERBATIM
        COMMENT "GPU compile check: ${compiler} ${path} (${arch_list})")
      list(APPEND outputs "${output}")
    endforeach()
  endforeach()
  if(outputs)
    add_custom_target(${name}_gpu_check ALL DEPENDS ${outputs})
  endif()
endfunction()
