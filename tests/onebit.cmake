# 1-bit Adam and 0/1 Adam: the codec layer's compressed all-reduce
# (engine/comm/codec.h), the optimizers (zero/onebit.h), their configs.
set(_onebit_dir ${CMAKE_CURRENT_SOURCE_DIR})

# The 1-bit compressed all-reduce against a hand-computed case and a serial
# reference of DeepSpeed's scheme, error feedback across calls, 0 ulps.
foreach(np 1 2 4)
  ds_add_mpi_test(NAME test_coded_allreduce SOURCES ${_onebit_dir}/multirank/test_coded_allreduce.c
                  NP ${np} LABELS multirank TIMEOUT 60)
endforeach()

# DeepSpeed's keys and defaults for both optimizers, the JSON round trip, and
# bad configs naming the key (stage, freeze_step, scalers, amsgrad, backend).
ds_add_test(NAME test_onebit_config SOURCES ${_onebit_dir}/unit/test_onebit_config.c LABELS unit)

# Training: warm-up equal to AdamW (bias_correction false) bit for bit, bytes
# per step after freeze_step >= 16x fewer (comm counters), the loss after
# freeze within a stated band of Adam's, the ranks' weights equal.
foreach(np 2 4)
  ds_add_mpi_test(NAME test_onebit SOURCES ${_onebit_dir}/multirank/test_onebit.c
                  ${_onebit_dir}/multirank/ckpt_harness.c ${_onebit_dir}/multirank/tied_model.c
                  NP ${np} LABELS multirank TIMEOUT 300)
endforeach()
target_include_directories(test_onebit PRIVATE ${_onebit_dir}/multirank)

# Exact resume (tests/multirank/test_ckpt_resume.sh, tolerance 0): the
# checkpoint carries each rank's error feedback (and 0/1 Adam's u and its own
# weights), so the second half equals the straight run bit for bit. 1-bit
# Adam: freeze_step 2, saved at step 4 in the compressed phase, fp32 and
# fp16. 0/1 Adam: variance steps 1, 2 and 4, a compressed-gradient step 3,
# local steps from 5 (intervals 1, 2, 4), saved at step 7 between two
# synchronisations (the ranks' weights differ there).
ds_ckpt_resume_test(ckpt_exact_onebit_mlp 4 0 2 0 2 0 mlp fp32 0)
ds_ckpt_resume_test(ckpt_exact_onebit_bert_fp16 4 0 2 0 2 0 bert fp16 0)
set_tests_properties(ckpt_exact_onebit_mlp ckpt_exact_onebit_bert_fp16 PROPERTIES ENVIRONMENT
  "OMP_NUM_THREADS=1;DS_CKPT_FRAME_ELEMS=64;CK_EXTRA=--optimizer OneBitAdam --optim-params ,\"freeze_step\":2")
ds_ckpt_resume_test(ckpt_exact_zeroone_mlp 7 0 2 0 2 0 mlp fp32 0)
set_tests_properties(ckpt_exact_zeroone_mlp PROPERTIES ENVIRONMENT
  "OMP_NUM_THREADS=1;DS_CKPT_FRAME_ELEMS=64;CK_EXTRA=--optimizer ZeroOneAdam --optim-params ,\"var_freeze_step\":3,\"var_update_scaler\":1,\"local_step_scaler\":1,\"local_step_clipper\":4")

# DeepSpeed's example configs (configs/onebit_adam*.json, zero_one_adam.json)
# run as written through engine-run (tests/unit/test_onebit_configs.sh).
add_test(NAME test_onebit_configs
         COMMAND ${_onebit_dir}/unit/test_onebit_configs.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_SOURCE_DIR}/configs ${CMAKE_BINARY_DIR}/tests/onebit_configs)
set_tests_properties(test_onebit_configs PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "OMP_NUM_THREADS=1")

# 0/1 Adam with local_step_scaler 2 (intervals 2, 4, 8, 16): loss within a
# stated band of Adam's over 400 steps, the ranks' weights the same bits
# after every synchronisation; DeepSpeed's exp_avg_mask through
# ds_set_exp_avg_mask (ones change nothing, zeros leave a tensor no
# momentum: exact checks), and its errors. About a second at 2 ranks.
ds_add_mpi_test(NAME test_onebit_local SOURCES ${_onebit_dir}/multirank/test_onebit_local.c
                ${_onebit_dir}/multirank/ckpt_harness.c ${_onebit_dir}/multirank/tied_model.c
                NP 2 LABELS multirank TIMEOUT 120)
target_include_directories(test_onebit_local PRIVATE ${_onebit_dir}/multirank)

# The same binary: both optimizers saved at 2 ranks mid-run (0/1 Adam
# between two synchronisations), resumed at 1 and at 4 ranks (error
# feedback reset, 0/1 Adam from the last synchronisation's weights), loss
# within a stated band of the run that never stopped.
add_test(NAME test_onebit_elastic
         COMMAND ${_onebit_dir}/multirank/test_onebit_elastic.sh $<TARGET_FILE:test_onebit_local>
                 ${CMAKE_BINARY_DIR}/tests/onebit_elastic ${DS_MPIRUN} ${DS_MPIRUN_FLAGS}
                 -x OMP_NUM_THREADS=1)
set_tests_properties(test_onebit_elastic PROPERTIES LABELS multirank TIMEOUT 120 PROCESSORS 4
                     ENVIRONMENT "OMP_NUM_THREADS=1")
