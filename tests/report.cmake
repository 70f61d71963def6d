# engine-run --report against /proc/cpuinfo, mpirun --version, pkg-config
# and engine.h's version (under a second).
add_test(NAME test_engine_run_report
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_report.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(test_engine_run_report PROPERTIES LABELS unit TIMEOUT 60)

# OpenBLAS's core against the CPU (engine/backend/blas_core.h): which fallback
# core engine-run replaces, with what, and the verdicts --report and
# ds_initialize print (no OpenBLAS call but the names; milliseconds).
ds_add_test(NAME test_blas_core SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_blas_core.c
            LABELS unit TIMEOUT 30)
