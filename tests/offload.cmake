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
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/offload_harness.c
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

# The swap's I/O engine (offload/aio.h): the thread pool and, where this
# build has liburing and the kernel allows it, io_uring; data, tickets,
# errors. The build tree is on a disk with O_DIRECT.
ds_add_test(NAME test_aio SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_aio.c LABELS unit
            ARGS ${CMAKE_BINARY_DIR}/tests)

# offload_optimizer {"device": "nvme"} (offload/nvme_swap.h): master weights
# and moments in swap files under a folder of the build tree (a real disk:
# the swap needs O_DIRECT). Stages 1-3, fp32 and fp16, 1 and 2 ranks: the
# same training as without offload bit for bit, sub-grouped and pipelined or
# with DeepSpeed's defaults; checkpoints both ways and zero_to_fp32; bf16 and
# SGD at one stage each.
add_executable(test_offload_nvme ${CMAKE_CURRENT_SOURCE_DIR}/multirank/test_offload_nvme.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/offload_harness.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/ckpt_harness.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/tied_model.c)
target_link_libraries(test_offload_nvme PRIVATE zero-engine)
foreach(stage 1 2 3)
  foreach(prec fp32 fp16)
    foreach(np 1 2)
      set(_nv_name offload_nvme_stage${stage}_${prec})
      ds_add_mpi_test(NAME ${_nv_name} NP ${np} LABELS multirank
                      COMMAND $<TARGET_FILE:test_offload_nvme> --stage ${stage} --precision ${prec}
                              --dir ${CMAKE_BINARY_DIR}/tests/${_nv_name}_np${np})
    endforeach()
  endforeach()
endforeach()
ds_add_mpi_test(NAME offload_nvme_stage3_bf16 NP 2 LABELS multirank
                COMMAND $<TARGET_FILE:test_offload_nvme> --stage 3 --precision bf16
                        --dir ${CMAKE_BINARY_DIR}/tests/offload_nvme_stage3_bf16_np2)
ds_add_mpi_test(NAME offload_nvme_stage1_sgd NP 2 LABELS multirank
                COMMAND $<TARGET_FILE:test_offload_nvme> --stage 1 --precision fp32
                        --optimizer SGD --dir ${CMAKE_BINARY_DIR}/tests/offload_nvme_stage1_sgd_np2)
# Bad nvme_path (missing, a file, not writable, no O_DIRECT, too small), too
# few buffers, a disk that fills mid-training.
ds_add_mpi_test(NAME offload_nvme_errors NP 2 LABELS fault
                COMMAND $<TARGET_FILE:test_offload_nvme> --errors
                        --dir ${CMAKE_BINARY_DIR}/tests/offload_nvme_errors_np2)
# A run killed with swap writes in flight leaves its folders; the next
# start-up removes them and trains.
set(_nv_crash ${CMAKE_BINARY_DIR}/tests/offload_nvme_crash)
add_test(NAME offload_nvme_crash
         COMMAND sh -c "rm -rf \"$3\"; \"$1\" $2 -np 2 -x OMP_NUM_THREADS=1 -x DS_FAULT_INJECT=nvme:mid_step \"$0\" --crash --dir \"$3\" && { echo 'the killed run exited 0'; exit 1; }; \"$1\" $2 -np 2 -x OMP_NUM_THREADS=1 \"$0\" --after-crash --dir \"$3\""
                 $<TARGET_FILE:test_offload_nvme> ${DS_MPIRUN} "${DS_MPIRUN_FLAGS_STR}" ${_nv_crash})
set_tests_properties(offload_nvme_crash PROPERTIES LABELS fault TIMEOUT 300 PROCESSORS 2)

# Checkpoints of a swapped state through tests/ckpt.cmake's resume harness
# (every phase swaps to its own folder; frames of 64 values, so a load writes
# the swap files in pieces smaller than their 4 KiB blocks): an exact resume
# at stage 3 in fp16 (tolerance 0: bit for bit), and elastic 2 ranks at
# stage 2 -> 1 rank at stage 1 (tolerance 1e-5 relative: the summation-order
# gap tests/ckpt.cmake explains for ckpt_elastic_2to1_mlp; the loaded
# parameters themselves are compared exactly).
ds_ckpt_resume_test(ckpt_nvme_exact_fp16_stage3 4 0 2 3 2 3 mlp fp16 0)
ds_ckpt_resume_test(ckpt_nvme_elastic_2to1 4 1e-5 2 2 1 1 mlp fp32 0)
foreach(_t ckpt_nvme_exact_fp16_stage3 ckpt_nvme_elastic_2to1)
  set_property(TEST ${_t} APPEND PROPERTY ENVIRONMENT
               "CK_EXTRA=--nvme ${CMAKE_BINARY_DIR}/tests/${_t}_nvme")
endforeach()

# configs/zero2_nvme.json and zero3_nvme.json drive a real 2-rank run through
# the launcher (tests/engine.cmake's gen_csv data), with nvme_path pointed at
# a folder of the build tree; the run ends with the evaluation table and
# leaves no swap file.
foreach(cfg zero2_nvme zero3_nvme)
  set(_d ${CMAKE_BINARY_DIR}/tests/config_run_${cfg})
  add_test(NAME config_run_${cfg}
           COMMAND sh -c "rm -rf \"$3\" && mkdir -p \"$3/nvme\" && sed 's|\"/local_nvme\"|\"'\"$3/nvme\"'\"|' \"$2\" > \"$3/cfg.json\" && \"$0\" --np 2 --config \"$3/cfg.json\" train_cls --data \"$1\" --model mlp --hidden 32 --intermediate 64 --max-seq-len 32 --max-steps 6 > \"$3/log\" 2>&1; rc=$?; cat \"$3/log\"; [ $rc -eq 0 ] && grep -q 'macro avg' \"$3/log\" && [ -z \"$(ls -A \"$3/nvme\")\" ]"
                   $<TARGET_FILE:engine-run> ${CMAKE_BINARY_DIR}/tests/gen_sentences.csv
                   ${CMAKE_SOURCE_DIR}/configs/${cfg}.json ${_d})
  set_tests_properties(config_run_${cfg} PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2
                       FIXTURES_REQUIRED gen_csv ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()

# offload_param at stage 3 (offload/param_store.h): the parameter partition
# in host memory, or in a file past max_in_cpu elements, with the optimizer
# on the device and swapped to NVMe: the same training bit for bit.
foreach(dev cpu nvme)
  foreach(prec fp32 fp16)
    foreach(np 1 2)
      set(_pp_name offload_param_${dev}_${prec})
      ds_add_mpi_test(NAME ${_pp_name} NP ${np} LABELS multirank
                      COMMAND $<TARGET_FILE:test_offload_nvme> --param ${dev} --precision ${prec}
                              --dir ${CMAKE_BINARY_DIR}/tests/${_pp_name}_np${np})
    endforeach()
  endforeach()
endforeach()
# configs/zero3_offload_param.json through the launcher, as config_run_offload.
add_test(NAME config_run_zero3_offload_param
         COMMAND $<TARGET_FILE:engine-run> --np 2
                 --config ${CMAKE_SOURCE_DIR}/configs/zero3_offload_param.json
                 train_cls --data ${CMAKE_BINARY_DIR}/tests/gen_sentences.csv --model mlp
                 --hidden 32 --intermediate 64 --max-seq-len 32 --max-steps 6)
set_tests_properties(config_run_zero3_offload_param PROPERTIES LABELS multirank TIMEOUT 300
                     PROCESSORS 2 FIXTURES_REQUIRED gen_csv ENVIRONMENT "OMP_NUM_THREADS=1"
                     PASS_REGULAR_EXPRESSION "macro avg")
