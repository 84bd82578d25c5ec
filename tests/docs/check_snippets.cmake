cmake_minimum_required(VERSION 3.25)
# Checks that a document shows a program's snippets verbatim (cmake -P, for CTest):
#   -DSOURCE=<program> -DDOC=<markdown file> -DSNIPPETS=<name>|<name>...
# A snippet is the text between two lines `// [<name>]` of SOURCE; DOC must contain it exactly, so
# that the documented code is the code the program compiles and runs.
file(READ "${SOURCE}" source)
file(READ "${DOC}" doc)
string(REPLACE "|" ";" names "${SNIPPETS}")
foreach(name IN LISTS names)
  set(marker "// [${name}]\n")
  string(FIND "${source}" "${marker}" first)
  if(first EQUAL -1)
    message(FATAL_ERROR "${SOURCE} has no line '// [${name}]'")
  endif()
  string(LENGTH "${marker}" marker_length)
  math(EXPR start "${first} + ${marker_length}")
  string(SUBSTRING "${source}" ${start} -1 rest)
  string(FIND "${rest}" "${marker}" length)
  if(length EQUAL -1)
    message(FATAL_ERROR "${SOURCE}: the snippet '${name}' has no closing '// [${name}]' line")
  endif()
  string(SUBSTRING "${rest}" 0 ${length} snippet)
  string(FIND "${doc}" "```cpp\n${snippet}```" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "${DOC} does not show the snippet '${name}' of ${SOURCE} verbatim (a "
                        "```cpp block holding exactly):\n${snippet}")
  endif()
  message(STATUS "${DOC} shows '${name}' of ${SOURCE}")
endforeach()
