# engine-run --report against /proc/cpuinfo, mpirun --version, pkg-config
# and engine.h's version (under a second).
add_test(NAME test_engine_run_report
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_report.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(test_engine_run_report PROPERTIES LABELS unit TIMEOUT 60)
