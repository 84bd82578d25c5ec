# devmem_hipcc_objects(<target> HIPCC <hipcc> OFFLOAD <flag>... ARCH_LIST <gfx90a,...>
#                      INCLUDES <dir or generator expression>... [OPTIONS <flag>...]
#                      FILES <source>...)
# Compiles kernel sources with hipcc into objects that the ordinary C++ toolchain links into
# <target>, with the target's compile definitions, the INCLUDES directories and OPTIONS; each
# records ARCH_LIST (DEVMEM_HIP_ARCHITECTURES) for devmem::launch's architecture check. The one
# hipcc rule behind devmem's own ROC kernels (backends/roc/CMakeLists.txt) and consumers' kernels
# (devmem_add_kernel_sources, devmem-kernels.cmake). Linking the HIP runtime is the caller's.
include_guard(GLOBAL)

function(devmem_hipcc_objects target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "HIPCC;ARCH_LIST" "OFFLOAD;INCLUDES;OPTIONS;FILES")
  set(defs "$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>")
  foreach(source IN LISTS arg_FILES)
    get_filename_component(path "${source}" ABSOLUTE)
    get_filename_component(name "${path}" NAME_WE)
    # The path's hash keeps objects of same-named sources from different folders apart.
    string(MD5 hash "${path}")
    string(SUBSTRING "${hash}" 0 8 hash)
    set(object "${CMAKE_CURRENT_BINARY_DIR}/${target}_${name}_${hash}.hip.o")
    add_custom_command(OUTPUT "${object}"
      COMMAND "${arg_HIPCC}" -x hip ${arg_OFFLOAD} -std=c++20 -fPIC -O2
              "-DDEVMEM_HIP_ARCHITECTURES=\"${arg_ARCH_LIST}\""
              "$<$<BOOL:${defs}>:-D$<JOIN:${defs},;-D>>"
              "$<$<BOOL:${arg_INCLUDES}>:-I$<JOIN:${arg_INCLUDES},;-I>>"
              ${arg_OPTIONS} -MD -MF "${object}.d" -c "${path}" -o "${object}"
      DEPENDS "${path}"
      DEPFILE "${object}.d"
      COMMAND_EXPAND_LISTS VERBATIM
      COMMENT "hipcc ${path} (${arg_ARCH_LIST})")
    set_source_files_properties("${object}" PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
    target_sources(${target} PRIVATE "${object}")
  endforeach()
endfunction()
