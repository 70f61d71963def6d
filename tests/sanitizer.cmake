# The sanitizer run's leak check (tools/test_sanitize.sh) suppresses Open
# MPI's leaks and nothing of ours (tests/sanitizer/test_lsan_probe.sh). Only
# in a DS_SANITIZE build; it needs that script's environment and says so
# (skipped) without it.
if(DS_SANITIZE)
  add_executable(lsan_probe ${CMAKE_CURRENT_SOURCE_DIR}/sanitizer/lsan_probe.c)
  target_link_libraries(lsan_probe PRIVATE MPI::MPI_C)
  add_test(NAME test_lsan_probe
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sanitizer/test_lsan_probe.sh
                   $<TARGET_FILE:lsan_probe> $<TARGET_FILE:zero-engine>
                   ${DS_MPIRUN} ${DS_MPIRUN_FLAGS})
  set_tests_properties(test_lsan_probe PROPERTIES LABELS multirank TIMEOUT 60 PROCESSORS 2
                       SKIP_RETURN_CODE 77)
endif()
