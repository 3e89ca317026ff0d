# The layer order of docs/design.md ("Layers"), checked on the sources: every `#include "dir/..."`
# of a file under one of the folders below must name a folder that folder may use. Run as
#   cmake -DROOT=<source tree> -P tests/layering.cmake
# Lists every include that breaks the order (file:line), then fails.
cmake_minimum_required(VERSION 3.16)  # IN_LIST
if(NOT ROOT)
  message(FATAL_ERROR "layering.cmake: pass -DROOT=<the source tree>")
endif()

# folder -> the folders its files may include from (itself included)
set(_may_use_base base)
set(_may_use_kokkos_kernels kokkos_kernels)
set(_may_use_text text)
set(_may_use_io base io text)
set(_may_use_src base kokkos_kernels io text src)

set(_problems "")
foreach(folder base kokkos_kernels text io src)
  file(GLOB_RECURSE _files ${ROOT}/${folder}/*.hpp ${ROOT}/${folder}/*.cpp ${ROOT}/${folder}/*.h)
  foreach(f IN LISTS _files)
    file(STRINGS ${f} _lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    file(STRINGS ${f} _all)
    foreach(line IN LISTS _lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*" "\\1" _path "${line}")
      if(NOT _path MATCHES "/")
        continue()  # a sibling header of the same folder
      endif()
      string(REGEX REPLACE "/.*" "" _top "${_path}")
      if(NOT _top IN_LIST _may_use_${folder})
        list(FIND _all "${line}" _index)
        math(EXPR _line_number "${_index} + 1")
        file(RELATIVE_PATH _rel ${ROOT} ${f})
        string(REPLACE ";" "/, " _allowed "${_may_use_${folder}}")
        string(APPEND _problems "  ${_rel}:${_line_number}: includes \"${_path}\"; ${folder}/ may include only from ${_allowed}/\n")
      endif()
    endforeach()
  endforeach()
endforeach()

if(_problems)
  message(FATAL_ERROR "includes against the layer order (docs/design.md, \"Layers\"):\n${_problems}")
endif()
message(STATUS "layering: every include follows the layer order")
