# Catch2 v2's implementation as a library of each build tree, built once and without optimisation:
# compiled inside every test program (CATCH_CONFIG_MAIN or CATCH_CONFIG_RUNNER) it cost about 29 s
# of a core per program at -O2, 13 s at -O0 (measured on CI's kind of machine, quiet), about 20
# times over in one CI run; nothing in it is on the path a test measures.
#   devmem_catch_runtime: the implementation, for programs that define main themselves.
#   devmem_catch_main: the implementation and a main that runs the session.
# Included from tests/CMakeLists.txt and mpi/tests/CMakeLists.txt (whichever comes first).
if(NOT TARGET devmem_catch_runtime)
  add_library(devmem_catch_runtime STATIC ${CMAKE_CURRENT_LIST_DIR}/catch_runtime.cpp)
  target_link_libraries(devmem_catch_runtime PUBLIC Catch2::Catch2)
  target_compile_options(devmem_catch_runtime PRIVATE -O0 -g0)
  # Sanitized trees instrument it too, so that their programs link and report through it.
  devmem_set_sanitizers(devmem_catch_runtime)
  add_library(devmem_catch_main STATIC ${CMAKE_CURRENT_LIST_DIR}/catch_main.cpp)
  target_link_libraries(devmem_catch_main PUBLIC devmem_catch_runtime)
  devmem_set_sanitizers(devmem_catch_main)
endif()
