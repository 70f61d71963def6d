# The memory estimator (zero/estimate.h) and the start-up check that uses it.
#
# test_estimate: every stage, precision and offload place of an MLP and a
# tied GPT-2, estimate against the accountant of a real engine within 5%;
# the parameter count alone against the model; DS_MEM_LIMIT refusing the
# plain config with the NVMe fix and admitting the NVMe config. At 1 and 2
# ranks (the partition, its padding and the per-host RAM differ).
foreach(np 1 2)
  ds_add_mpi_test(NAME test_estimate NP ${np} LABELS multirank
                  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/multirank/test_estimate.c
                  ARGS ${CMAKE_BINARY_DIR}/tests/estimate_np${np})
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/tests/estimate_np${np})
endforeach()
