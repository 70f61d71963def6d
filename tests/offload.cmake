# offload_optimizer {"device": "cpu"} (offload/host_optim.h): optimizer state
# in host memory, the update on the host.
#
# Stages 1-3, fp32 and fp16, at 1 and 2 ranks: training with offload equals
# training without it bit for bit (losses, lr, loss scale, parameters), the
# master and moments are accounted on the host, a step allocates nothing, and
# checkpoints load across the offload boundary both ways (bit-exact
# parameters, identical continued losses). Plus bf16 and SGD with momentum at
# one stage each, and the BERT-mini memory split at stage 2.
add_executable(test_offload ${CMAKE_CURRENT_SOURCE_DIR}/multirank/test_offload.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/ckpt_harness.c # ck_make_data
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/tied_model.c)
target_link_libraries(test_offload PRIVATE zero-engine)
foreach(stage 1 2 3)
  foreach(prec fp32 fp16)
    foreach(np 1 2)
      set(_off_name offload_stage${stage}_${prec})
      ds_add_mpi_test(NAME ${_off_name} NP ${np} LABELS multirank
                      COMMAND $<TARGET_FILE:test_offload> --stage ${stage} --precision ${prec}
                              --dir ${CMAKE_BINARY_DIR}/tests/${_off_name}_np${np})
    endforeach()
  endforeach()
endforeach()
ds_add_mpi_test(NAME offload_stage3_bf16 NP 2 LABELS multirank
                COMMAND $<TARGET_FILE:test_offload> --stage 3 --precision bf16
                        --dir ${CMAKE_BINARY_DIR}/tests/offload_stage3_bf16_np2)
ds_add_mpi_test(NAME offload_stage1_sgd NP 2 LABELS multirank
                COMMAND $<TARGET_FILE:test_offload> --stage 1 --precision fp32 --optimizer SGD
                        --dir ${CMAKE_BINARY_DIR}/tests/offload_stage1_sgd_np2)
ds_add_mpi_test(NAME offload_bert_mini NP 2 LABELS multirank
                COMMAND $<TARGET_FILE:test_offload> --bert-mini)

# configs/offload.json drives a real 2-rank run through the launcher, like
# tests/engine.cmake's config_run_* (its gen_csv fixture makes the data).
add_test(NAME config_run_offload
         COMMAND $<TARGET_FILE:engine-run> --np 2 --config ${CMAKE_SOURCE_DIR}/configs/offload.json
                 train_cls --data ${CMAKE_BINARY_DIR}/tests/gen_sentences.csv --model mlp
                 --hidden 32 --intermediate 64 --max-seq-len 32 --max-steps 6)
set_tests_properties(config_run_offload PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2
                     FIXTURES_REQUIRED gen_csv ENVIRONMENT "OMP_NUM_THREADS=1"
                     PASS_REGULAR_EXPRESSION "macro avg")
