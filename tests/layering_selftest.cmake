# tests/layering.cmake on small made-up trees: a tree that follows its table passes, and each
# kind of break fails with its own message (an include that runs up, a circle of arrows, a
# library linking other folders than its arrows, a source outside every folder). Run as
#   cmake -DLAYERING=<tests/layering.cmake> -DDIR=<scratch folder> -P tests/layering_selftest.cmake
cmake_minimum_required(VERSION 3.16)
if(NOT LAYERING OR NOT DIR)
  message(FATAL_ERROR "layering_selftest.cmake: pass -DLAYERING=<tests/layering.cmake> -DDIR=<scratch folder>")
endif()

# A tree: `low/` <- `src/mid/` <- `src/top/`, with the given extra table row text for src/mid
# and the CMake row of src/top.
function(make_tree root mid_uses top_row)
  file(REMOVE_RECURSE ${root})
  file(WRITE ${root}/docs/design.md
       "# Design\n\n## Layers\n\n| folder | library | what it holds | uses |\n|---|---|---|---|\n"
       "| `low/` | `low` | the bottom | — |\n"
       "| `src/mid/` | `mid` | the middle | ${mid_uses} |\n"
       "| `src/top/` | `top` | the top | `src/mid/` |\n\n## Next\n\n| `src/other/` | not a row | of the table | `low/` |\n")
  file(WRITE ${root}/src/CMakeLists.txt "  set(layers\n    \"mid\"\n    \"${top_row}\"\n  )\n")
  file(WRITE ${root}/low/low.hpp "#pragma once\n")
  file(WRITE ${root}/src/mid/mid.hpp "#pragma once\n#include \"low/low.hpp\"\n")
  file(WRITE ${root}/src/top/top.cpp "#include \"src/mid/mid.hpp\"\n#include \"low/low.hpp\"\n#include \"top.hpp\"\n")
endfunction()

set(failures "")
# expect(name root pattern): pattern "" = passes; else fails with output matching it.
function(expect name root pattern)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${root} -P ${LAYERING}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}${err}")
  if(pattern STREQUAL "")
    if(NOT rc EQUAL 0)
      set(failures "${failures}${name}: expected to pass, failed:\n${all}\n" PARENT_SCOPE)
    endif()
  elseif(rc EQUAL 0 OR NOT all MATCHES "${pattern}")
    set(failures "${failures}${name}: expected a failure matching '${pattern}', got (rc ${rc}):\n${all}\n" PARENT_SCOPE)
  endif()
endfunction()

make_tree(${DIR}/clean "`low/`" "top mid")
expect(clean ${DIR}/clean "")

make_tree(${DIR}/upward "`low/`" "top mid")
file(APPEND ${DIR}/upward/src/mid/mid.hpp "#include \"src/top/top.hpp\"\n")
expect(upward ${DIR}/upward "src/mid/mid.hpp:3: includes \"src/top/top.hpp\"; src/mid/ reaches only src/mid/, low/")

make_tree(${DIR}/circle "`low/`, `src/top/`" "top mid")
expect(circle ${DIR}/circle "the arrows run in a circle: src/mid/ -> src/top/ -> src/mid/")

make_tree(${DIR}/unknown "`low/`, `src/nowhere/`" "top mid")
expect(unknown ${DIR}/unknown "src/mid/ uses src/nowhere/, which has no row of its own")

make_tree(${DIR}/links "`low/`" "top")
expect(links ${DIR}/links "src/top/ links nothing of src/; docs/design.md gives it src/mid/")

make_tree(${DIR}/stray "`low/`" "top mid")
file(WRITE ${DIR}/stray/src/loose.cpp "int x;\n")
expect(stray ${DIR}/stray "src/loose.cpp: in no folder of the table")

if(failures)
  message(FATAL_ERROR "layering.cmake did not judge the made-up trees as expected:\n${failures}")
endif()
message(STATUS "layering self-test: 6 made-up trees judged as expected")
