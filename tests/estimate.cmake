# The memory estimator (zero/estimate.h) and the start-up check that uses it.
#
# test_estimate: every stage, precision and offload place of an MLP and a
# tied GPT-2, estimate against the accountant of a real engine within 5%;
# the parameter count alone against the model; DS_MEM_LIMIT refusing the
# plain config with the NVMe fix and admitting the NVMe config. At 1 and 2
# ranks (the partition, its padding and the per-host RAM differ).
foreach(np 1 2)
  ds_add_mpi_test(NAME test_estimate NP ${np} LABELS multirank
                  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/multirank/test_estimate.c
                  ARGS ${CMAKE_BINARY_DIR}/tests/estimate_np${np})
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/tests/estimate_np${np})
endforeach()

# The program: a 2e9-parameter bf16 MLP at stage 1 on one rank under a 24
# GiB limit is refused and NVMe named as the fix (30.5 GiB of RAM without
# offload); bad input is one line and exit status 2.
add_test(NAME zero_estimate_2b
         COMMAND $<TARGET_FILE:zero_estimate> --params 2013282308 --largest-layer 67117056
                 --stage 1 --precision bf16)
set_tests_properties(zero_estimate_2b PROPERTIES LABELS unit ENVIRONMENT "DS_MEM_LIMIT=24G"
  PASS_REGULAR_EXPRESSION "total +30\\.500 +0\\.000 +0\\.000.*does NOT fit.*fix: zero_optimization\\.offload_optimizer\\.device \"nvme\"")
add_test(NAME zero_estimate_bad_args
         COMMAND $<TARGET_FILE:zero_estimate> --params 10 --offload-param disk)
set_tests_properties(zero_estimate_bad_args PROPERTIES LABELS unit WILL_FAIL TRUE)

# --model-config: the tiny GPT-2 fixture's config.json (vocab 97, n_embd 32,
# 2 layers, 16 positions, tied head) is the bundled GPT-2's 29,088
# parameters, by hand: wte 97*32 + wpe 16*32 + 2 layers * (2 LN 2*64 +
# c_attn 32*96+96 + attn c_proj 32*32+32 + c_fc 32*128+128 + mlp c_proj
# 128*32+32) + ln_f 64.
add_test(NAME zero_estimate_model_config
         COMMAND $<TARGET_FILE:zero_estimate> --model-config
                 ${CMAKE_CURRENT_SOURCE_DIR}/data/gpt2_ref_tiny_hf/config.json --ranks 2 --stage 3)
set_tests_properties(zero_estimate_model_config PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "Estimated memory per rank: 29088 parameters .*2 ranks .*ZeRO stage 3")

# A Hugging Face template ("auto" everywhere, configs/hf_zero2.json) estimates
# as the Trainer would run it (its defaults: micro batch 8, fp32 for the
# "auto" precisions), the buckets from the model's hidden size; --precision
# fills the "auto" precision keys. It was refused ("lr: auto needs the
# trainer's value").
add_test(NAME zero_estimate_hf_auto
         COMMAND $<TARGET_FILE:zero_estimate> --model-config
                 ${CMAKE_CURRENT_SOURCE_DIR}/data/gpt2_ref_tiny_hf/config.json --ranks 2
                 --config ${CMAKE_SOURCE_DIR}/configs/hf_zero2.json --precision bf16)
set_tests_properties(zero_estimate_hf_auto PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "Estimated memory per rank: 29088 parameters .*2 ranks .*ZeRO stage 2, bf16, cpu backend,\noffload_optimizer cpu")

# The estimator's edges in one process (tests/unit/test_estimate_limits.c):
# DS_MEM_LIMIT's accepted and refused values; a memory cgroup's headroom
# (v2 and v1, in a fake /proc and /sys/fs/cgroup) below MemAvailable; the
# start-up check counting the ranks really on this host (8 + 2 placement);
# parameter counts and config sizes whose bytes would leave 64 bits; the
# suggested fix lowering max_in_cpu with max-live 0 and NVMe offload.
ds_add_test(NAME test_estimate_limits
            SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_estimate_limits.c LABELS unit TIMEOUT 60)

# zero_estimate's refusals of bad arguments and environment (DS_MEM_LIMIT,
# counts that are not whole numbers in range, stage 3 without
# --largest-layer, more ranks per host than ranks), and what it reads
# (tests/unit/test_zero_estimate_args.sh).
add_test(NAME test_zero_estimate_args
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_zero_estimate_args.sh ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(test_zero_estimate_args PROPERTIES LABELS unit TIMEOUT 60)
