# Hierarchical partitioning at stage 3 (issue 22, item 3): ZeRO++ hpZ
# (zero_hpz_partition_size) and MiCS (mics_shard_size,
# mics_hierarchical_params_gather) beside plain stage 3: bytes per step
# inside and across hosts equal the formula, losses bit for bit (MiCS at 4
# ranks: a band, its reason in tests/multirank/test_hier.c), checkpoints
# resume and load into plain stage 3. On one host here; across two
# simulated hosts (2 x 2 ranks) by tests/unit/test_hier_twohost.sh where
# namespaces can be made.
add_executable(test_hier ${CMAKE_CURRENT_SOURCE_DIR}/multirank/test_hier.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/ckpt_harness.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/tied_model.c)
target_link_libraries(test_hier PRIVATE zero-engine)
target_include_directories(test_hier PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multirank)
set(_hier_work ${CMAKE_CURRENT_BINARY_DIR}/hier_work)
foreach(np 2 4)
  math(EXPR _shard "${np} / 2")
  add_test(NAME stage3_hpz_np${np} COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np ${np}
           -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --hpz 2
           --ckpt ${_hier_work}/hpz_np${np})
  add_test(NAME stage3_mics_np${np} COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np ${np}
           -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --mics ${_shard}
           --ckpt ${_hier_work}/mics_np${np})
  set_tests_properties(stage3_hpz_np${np} stage3_mics_np${np} PROPERTIES LABELS multirank
                       TIMEOUT 300 PROCESSORS 2)
endforeach()
# one shard group as wide as the world: no groups made, gather_rows left
# out all the same (the estimate, which sees the config alone, to the byte)
add_test(NAME stage3_mics_world_np2 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 2
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --mics 2)
set_tests_properties(stage3_mics_world_np2 PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2)
add_test(NAME stage3_hpz_bf16_np2 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 2
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --hpz 2 --precision bf16)
set_tests_properties(stage3_hpz_bf16_np2 PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2)
# hpZ with offload_param cpu (the partition in host memory, the secondary
# piece on the device): the same bits as plain stage 3 without offload, the
# same bytes, estimate = accountant, the checkpoint resumes and loads
add_test(NAME stage3_hpz_offload_np4 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 4
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --hpz 2 --offload 1
         --ckpt ${_hier_work}/hpz_offload_np4)
set_tests_properties(stage3_hpz_offload_np4 PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2)
# the same with offload_param nvme: hpZ's secondary copy beside a partition
# swapped to files (ZeRO-Infinity), losses to plain's bits, bytes to the formula
file(MAKE_DIRECTORY ${_hier_work}/hpz_nvme_swap)
add_test(NAME stage3_hpz_nvme_np4 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 4
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --hpz 2 --nvme ${_hier_work}/hpz_nvme_swap
         --ckpt ${_hier_work}/hpz_nvme_np4)
set_tests_properties(stage3_hpz_nvme_np4 PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2)
# qgZ's int4 scheme splits the communicator at start-up: rank 1 failing
# before its build (its groups) or at its end (its allocations), every
# rank's ds_initialize fails at once, the others naming rank 1
foreach(site groups alloc)
  add_test(NAME stage3_qgz_init_fails_${site}_np2 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 2
           -x OMP_NUM_THREADS=1 -x DS_FAULT_INJECT=error:stage3:${site}:rank=1
           $<TARGET_FILE:test_hier> --qgz 1 --int4 1 --init-fails 1)
  set_tests_properties(stage3_qgz_init_fails_${site}_np2 PROPERTIES LABELS multirank TIMEOUT 60
                       PROCESSORS 2)
endforeach()
add_test(NAME stage3_hier_twohost
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_hier_twohost.sh
                 $<TARGET_FILE:test_hier> ${_hier_work}/twohost ${CMAKE_SOURCE_DIR}/tools/twohost.sh
                 ${CMAKE_BINARY_DIR}/bin)
# Label nosan (tools/test_sanitize.sh leaves it out): the same test_hier
# code as stage3_hpz_np4 and stage3_mics_np4, which the sanitizer run keeps,
# over TCP between namespaces instead of shared memory; 13 s there.
set_tests_properties(stage3_hier_twohost PROPERTIES LABELS "multirank;nosan" TIMEOUT 600
                     PROCESSORS 2 SKIP_RETURN_CODE 77)
# ZeRO++ as DeepSpeed's tutorial configures it (hpZ + qwZ + qgZ), and MiCS
# with qwZ + qgZ: int8 records in every gather (hpZ's secondary group's
# too) and in the gradients' all-to-all, bytes per step equal the formula,
# losses within a band of plain stage 3 (step 1 the bits of qwZ alone under
# hpZ), checkpoints resume and load into plain stage 3
add_test(NAME stage3_hpz_qwz_qgz_np4 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 4
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --hpz 2 --qwz 1 --qgz 1
         --ckpt ${_hier_work}/zeropp_np4)
add_test(NAME stage3_mics_qwz_qgz_np4 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 4
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --mics 2 --qwz 1 --qgz 1
         --ckpt ${_hier_work}/mics_q_np4)
set_tests_properties(stage3_hpz_qwz_qgz_np4 stage3_mics_qwz_qgz_np4 PROPERTIES
                     LABELS multirank TIMEOUT 300 PROCESSORS 2)
# sizes the world refuses, each naming its key (the keys alone: test_config_bad)
add_test(NAME stage3_hier_refusals_np4 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 4
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --refusals 1)
set_tests_properties(stage3_hier_refusals_np4 PROPERTIES LABELS multirank TIMEOUT 120 PROCESSORS 2)
# elastic: MiCS's checkpoint of 4 ranks (2 groups of 2) loads at 2 ranks,
# into plain stage 3 and into MiCS with groups of 1, the same parameters
set_tests_properties(stage3_mics_np4 PROPERTIES FIXTURES_SETUP hier_mics4)
add_test(NAME stage3_mics_elastic_4to2_plain COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 2
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --load ${_hier_work}/mics_np4)
add_test(NAME stage3_mics_elastic_4to2_mics1 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 2
         -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --mics 1 --load ${_hier_work}/mics_np4)
set_tests_properties(stage3_mics_elastic_4to2_plain stage3_mics_elastic_4to2_mics1 PROPERTIES
                     LABELS multirank TIMEOUT 300 PROCESSORS 2 FIXTURES_REQUIRED hier_mics4)
# gradient accumulation: hpZ's later micro-batches gather from the secondary
# copy too (one update, one refill); MiCS all-reduces across groups once
foreach(t hpz mics)
  add_test(NAME stage3_${t}_gas2_np4 COMMAND ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -np 4
           -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_hier> --${t} 2 --gas 2)
  set_tests_properties(stage3_${t}_gas2_np4 PROPERTIES LABELS multirank TIMEOUT 300
                       PROCESSORS 2)
endforeach()
