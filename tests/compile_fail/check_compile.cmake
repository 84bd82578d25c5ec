cmake_minimum_required(VERSION 3.25)
# Compiles SOURCE (cmake -P, for CTest):
#   -DCOMPILER=<c++> -DSOURCE=<file> -DINCLUDES=<dirs separated by '|'> -DOUTCOME=FAIL|PASS
#   [-DEXPECT=<regex the compiler's output must contain when it fails>]
#   [-DFLAGS=<more compiler flags, separated by '|', placed before the source>]
#   [-DMAX_ERRORS=<the most "error:" lines a failing compile may print>]
# A FAIL test also refuses diagnostics from inside devmem::detail::KernelArgument: the point of the
# static_asserts is that they are the whole message.
string(REPLACE "|" ";" include_list "${INCLUDES}")
list(TRANSFORM include_list PREPEND "-I")
string(REPLACE "|" ";" flag_list "${FLAGS}")
execute_process(COMMAND "${COMPILER}" -std=c++20 -fsyntax-only ${include_list} ${flag_list}
                        "${SOURCE}"
                RESULT_VARIABLE exit_code OUTPUT_VARIABLE out ERROR_VARIABLE out)
set(shown "${COMPILER} ${SOURCE}\n--- exit ${exit_code}\n--- output\n${out}")
if(OUTCOME STREQUAL "PASS")
  if(NOT exit_code EQUAL 0)
    message(FATAL_ERROR "expected to compile\n${shown}")
  endif()
  return()
endif()
if(exit_code EQUAL 0)
  message(FATAL_ERROR "compiled, but must not\n${shown}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the diagnostic does not contain '${EXPECT}'\n${shown}")
endif()
if(MAX_ERRORS)
  string(REGEX MATCHALL "error:" errors "${out}")
  list(LENGTH errors error_count)
  if(error_count GREATER MAX_ERRORS)
    message(FATAL_ERROR "${error_count} errors, more than ${MAX_ERRORS}\n${shown}")
  endif()
endif()
if(out MATCHES "error:[^\n]*KernelArgument")
  message(FATAL_ERROR "an error inside KernelArgument besides the static_assert\n${shown}")
endif()
message(STATUS "fails as expected:\n${out}")
