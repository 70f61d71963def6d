# ZeRO++ qgZ (issue 22, item 4): stage 3's gradient reduce-scatter in
# blockwise int8, one all-to-all (engine/comm/codec_q8.h). The tied model of
# tied_model.h trained with and without it: the all-to-all bytes per step
# equal the formula, the losses stay within a band, stage 2 is refused
# (tests/multirank/test_qgz.c); qgz_scheme "int4" on one host is the plain
# reduce-scatter to the bit (DeepSpeed's fallback; test_qgz --hosts 2 under
# tools/twohost.sh checks its two levels by hand). The codec's records:
# qwZ's tests (tests/qwz.cmake), which share it.
add_executable(test_qgz ${CMAKE_CURRENT_SOURCE_DIR}/multirank/test_qgz.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/ckpt_harness.c # ck_make_data
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/tied_model.c)
target_link_libraries(test_qgz PRIVATE zero-engine)
target_include_directories(test_qgz PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multirank)
foreach(run "fp32;2" "bf16;2" "fp32;4")
  list(GET run 0 prec)
  list(GET run 1 np)
  add_test(NAME stage3_qgz_${prec}_np${np} COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np ${np}
           -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_qgz> --precision ${prec})
  set_tests_properties(stage3_qgz_${prec}_np${np} PROPERTIES LABELS multirank TIMEOUT 300
                       PROCESSORS 2)
endforeach()

# The quantized reduce-scatter itself in rounds of a fixed scratch: 0 ulps
# against the one-round scheme done serially, the same bytes, one call per
# round, the accountant's scratch the formula (tests/multirank/test_q8_rs.c;
# well under a second).
foreach(np 2 4)
  ds_add_mpi_test(NAME test_q8_rs SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/multirank/test_q8_rs.c
                  NP ${np} LABELS multirank TIMEOUT 60)
endforeach()

# DeepSpeed's qgZ (zero_engine.qgz_scheme "int4", engine/comm/codec_q4.h): the
# int4 quantizer against its derived bound and DeepSpeed's bytes
# (unit/test_quant4.c), and the two-level reduce-scatter at 4 ranks with
# hosts faked as 2 x 2 (and 1 x 4, 4 x 1): the exact sum within the bound,
# 0 ulps against a serial one-round reference, bytes inside and across hosts
# equal the formula (multirank/test_q4_rs.c; about a second each).
ds_add_test(NAME test_quant4 SOURCES unit/test_quant4.c LABELS unit)
ds_add_mpi_test(NAME test_q4_rs SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/multirank/test_q4_rs.c
                NP 4 LABELS multirank TIMEOUT 60)
