# ZeRO++ qwZ (issue 22, item 4): stage 3's parameter all-gathers in
# blockwise int8. At 2 ranks a small BERT trained with and without it: the
# all-gather bytes per step equal the formula (a quarter of fp32's, a half of
# bf16's, plus the scales) and the losses stay within a band
# (tests/multirank/test_qwz.c). The quantizer itself: unit/test_quant.c.
add_executable(test_qwz ${CMAKE_CURRENT_SOURCE_DIR}/multirank/test_qwz.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/ckpt_harness.c # ck_make_data
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/tied_model.c)  # which ck_engine uses
target_link_libraries(test_qwz PRIVATE zero-engine)
target_include_directories(test_qwz PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multirank)
foreach(prec fp32 bf16)
  add_test(NAME stage3_qwz_${prec}_np2 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 2
           -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_qwz> --precision ${prec})
  set_tests_properties(stage3_qwz_${prec}_np2 PROPERTIES LABELS multirank TIMEOUT 300
                       PROCESSORS 2)
endforeach()
# offload_param cpu: the piece is read from host memory, then quantized
add_test(NAME stage3_qwz_offload_fp32_np2 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 2
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_qwz> --precision fp32 --offload 1)
set_tests_properties(stage3_qwz_offload_fp32_np2 PROPERTIES LABELS multirank TIMEOUT 300
                     PROCESSORS 2)
