# tests/layering.cmake on small made-up trees: a tree that follows its table passes, and each
# kind of break fails with its own message (an include that runs up, a circle of arrows, a
# library linking other folders than its arrows, a source outside every folder, a sublayer kind
# including a kind it is not built from or a file above the kinds, a file outside the kinds and
# the registry including a kind). Run as
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

# The sublayer kinds: a registry composing kind a and kind b (built from a), a shared file.
function(make_kinds_tree root)
  file(REMOVE_RECURSE ${root})
  file(WRITE ${root}/docs/design.md
       "# Design\n\n## Layers\n\n| folder | library | what it holds | uses |\n|---|---|---|---|\n"
       "| `src/model/` | `model` | the kinds | — |\n| `src/top/` | `top` | the top | `src/model/` |\n\n"
       "### Sublayer kinds\n\n| kind | files | built from |\n|---|---|---|\n"
       "| a | `src/model/a.hpp` | — |\n| b | `src/model/b.hpp`, `src/model/b_part.hpp` | a |\n\n## Next\n")
  file(WRITE ${root}/src/CMakeLists.txt "  set(layers\n    \"model\"\n    \"top model\"\n  )\n")
  file(WRITE ${root}/src/model/shared.hpp "#pragma once\n")
  file(WRITE ${root}/src/model/a.hpp "#pragma once\n#include \"src/model/shared.hpp\"\n")
  file(WRITE ${root}/src/model/b_part.hpp "#pragma once\n")
  file(WRITE ${root}/src/model/b.hpp "#pragma once\n#include \"src/model/a.hpp\"\n#include \"src/model/b_part.hpp\"\n")
  file(WRITE ${root}/src/model/transformer_layer.hpp "#pragma once\n#include \"src/model/a.hpp\"\n#include \"src/model/b.hpp\"\n")
  file(WRITE ${root}/src/model/gpt_model.hpp "#pragma once\n#include \"src/model/transformer_layer.hpp\"\n")
  file(WRITE ${root}/src/top/top.cpp "#include \"src/model/gpt_model.hpp\"\n")
endfunction()

make_kinds_tree(${DIR}/kinds)
expect(kinds ${DIR}/kinds "")

make_kinds_tree(${DIR}/kind_not_built_from)
file(APPEND ${DIR}/kind_not_built_from/src/model/a.hpp "#include \"src/model/b_part.hpp\"\n")
expect(kind_not_built_from ${DIR}/kind_not_built_from
       "src/model/a.hpp:3: includes \"src/model/b_part.hpp\", a file of the sublayer kind b")

make_kinds_tree(${DIR}/kind_above)
file(APPEND ${DIR}/kind_above/src/model/a.hpp "#include \"src/model/gpt_model.hpp\"\n")
expect(kind_above ${DIR}/kind_above "src/model/a.hpp:3: includes \"src/model/gpt_model.hpp\", which composes the kinds")

make_kinds_tree(${DIR}/kind_outsider)
file(APPEND ${DIR}/kind_outsider/src/top/top.cpp "#include \"src/model/a.hpp\"\n")
expect(kind_outsider ${DIR}/kind_outsider "src/top/top.cpp:2: includes \"src/model/a.hpp\", a file of the sublayer kind a")

if(failures)
  message(FATAL_ERROR "layering.cmake did not judge the made-up trees as expected:\n${failures}")
endif()
message(STATUS "layering self-test: 10 made-up trees judged as expected")
