# The prepared GPU check rehearsed on this CPU build (tests/device_check_rehearsal.sh): a bundle
# packed from the build tree, `jobs/device-check.sh --rehearse --quick` on it in a stripped
# environment, its result files holding numbers, and a GPU run refusing the CPU bundle. About
# 30-60 s on 2 cores. Not for a CUDA build: its programs need the GPU that the real check has.
if(NOT TPTRAIN_KOKKOS_HAS_CUDA)
  add_test(NAME device_check_rehearsal
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/device_check_rehearsal.sh ${PROJECT_BINARY_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/device_check_rehearsal)
  set_tests_properties(device_check_rehearsal PROPERTIES TIMEOUT 150)
endif()
