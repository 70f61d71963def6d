# flops_profiler: per-module GEMM flops of the MLP, BERT and a model written
# against the public module API, against hand counts; the printed profile.
ds_add_test(NAME test_flops_profiler SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_flops_profiler.c
            LABELS unit)
