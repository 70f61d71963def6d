# 1-bit Adam and 0/1 Adam: the codec layer's compressed all-reduce
# (engine/comm/codec.h), the optimizers (zero/onebit.h), their configs.
set(_onebit_dir ${CMAKE_CURRENT_SOURCE_DIR})

# The 1-bit compressed all-reduce against a hand-computed case and a serial
# reference of DeepSpeed's scheme, error feedback across calls, 0 ulps.
foreach(np 1 2 4)
  ds_add_mpi_test(NAME test_coded_allreduce SOURCES ${_onebit_dir}/multirank/test_coded_allreduce.c
                  NP ${np} LABELS multirank TIMEOUT 60)
endforeach()
