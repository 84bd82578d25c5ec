# devmem_label_tests_by_tags(<target> <prefix> LABELS <labels...> TAGS <tags...>)
#
# Gives the CTest tests "<prefix>:<name>" of a Catch2 program the labels LABELS (in place of the
# ones they had) when their test case carries one of TAGS, so that a CTest label chooses a group
# by what the tests are tagged with rather than by words in their names. CI's TSan step uses it:
# `ctest -L threads` (the tests of threads, streams, events and the kernel simulator).
#
# The program lists its matching tests when CTest reads the test files (Catch2's
# --list-test-names-only with the tags as a spec), which costs one short run of the program per
# CTest invocation; Catch2 v2's catch_discover_tests has no way to turn tags into labels, and the
# list it writes at build time is of every test of the spec, without their tags. Hidden tests ([.])
# are left out, as catch_discover_tests leaves them out. Call it after the discovery of <prefix>'s
# tests, so that its include file runs after theirs.
function(devmem_label_tests_by_tags target prefix)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "LABELS;TAGS")
  if(NOT arg_LABELS OR NOT arg_TAGS)
    message(FATAL_ERROR "devmem_label_tests_by_tags(${target} ${prefix}): LABELS and TAGS needed")
  endif()
  # A Catch2 spec: each tag an alternative (','), none of them hidden ('~[.]' in each).
  set(spec "")
  foreach(tag IN LISTS arg_TAGS)
    if(spec)
      string(APPEND spec ",")
    endif()
    string(APPEND spec "${tag}~[.]")
  endforeach()
  string(MAKE_C_IDENTIFIER "devmem_${prefix}_${target}_labels_by_tags" id)
  set(file "${CMAKE_CURRENT_BINARY_DIR}/${id}.cmake")
  # The output is walked line by line with string(FIND), not as a CMake list: names may hold ';'
  # or unbalanced brackets, which a list would split or join.
  file(GENERATE OUTPUT "${file}" CONTENT "\
execute_process(COMMAND [==[$<TARGET_FILE:${target}>]==] [==[${spec}]==] --list-test-names-only
                OUTPUT_VARIABLE devmem_rest ERROR_QUIET)
while(NOT devmem_rest STREQUAL \"\")
  string(FIND \"\${devmem_rest}\" \"\\n\" devmem_end)
  if(devmem_end EQUAL -1)
    set(devmem_name \"\${devmem_rest}\")
    set(devmem_rest \"\")
  else()
    string(SUBSTRING \"\${devmem_rest}\" 0 \${devmem_end} devmem_name)
    math(EXPR devmem_end \"\${devmem_end} + 1\")
    string(SUBSTRING \"\${devmem_rest}\" \${devmem_end} -1 devmem_rest)
  endif()
  if(NOT devmem_name STREQUAL \"\")
    set_tests_properties(\"${prefix}:\${devmem_name}\" PROPERTIES LABELS [==[${arg_LABELS}]==])
  endif()
endwhile()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${file}")
endfunction()

# devmem_keep_sources_with_tags(<out_var> TAGS <tags...> SOURCES <files...> [ALWAYS <files...>])
#
# With DEVMEM_THREADS_TESTS_ONLY on, sets <out_var> to the ALWAYS files (a program's main) and those
# of SOURCES whose text names one of TAGS (a Catch2 tag such as "[streams]", as written in a
# TEST_CASE): the only sources that can hold a test devmem_label_tests_by_tags gives the label, so a
# build for CI's TSan step (`ctest -L threads`) compiles nothing it will not run. Otherwise <out_var>
# is every file. Paths are relative to the current source directory; configuring again follows
# an edit of a source's tags.
function(devmem_keep_sources_with_tags out_var)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "TAGS;SOURCES;ALWAYS")
  if(NOT DEVMEM_THREADS_TESTS_ONLY)
    set(${out_var} ${arg_ALWAYS} ${arg_SOURCES} PARENT_SCOPE)
    return()
  endif()
  set(kept ${arg_ALWAYS})
  foreach(source IN LISTS arg_SOURCES)
    set(path "${CMAKE_CURRENT_SOURCE_DIR}/${source}")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${path}")
    file(READ "${path}" text)
    foreach(tag IN LISTS arg_TAGS)
      string(FIND "${text}" "${tag}" at)
      if(NOT at EQUAL -1)
        list(APPEND kept "${source}")
        break()
      endif()
    endforeach()
  endforeach()
  set(${out_var} ${kept} PARENT_SCOPE)
endfunction()
