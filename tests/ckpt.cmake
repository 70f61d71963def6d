# Checkpoints (issue 5): shard files, meta.json, save/load, exact and elastic
# resume, crash safety, zero_to_fp32.
set(_ck ${CMAKE_CURRENT_SOURCE_DIR})

ds_add_test(NAME test_ckpt_file SOURCES ${_ck}/unit/test_ckpt_file.c LABELS unit)
target_link_libraries(test_ckpt_file PRIVATE PkgConfig::ZSTD)
ds_add_test(NAME test_ckpt_meta SOURCES ${_ck}/unit/test_ckpt_meta.c LABELS unit)
# Every rank sees the folder rank 0 writes: the marker read back from the
# same folder passes, from another folder fails with one clear line.
ds_add_test(NAME test_ckpt_shared SOURCES ${_ck}/unit/test_ckpt_shared.c LABELS unit)

# ---- exact and elastic resume ----------------------------------------------
# Each case runs three process groups (tests/multirank/test_ckpt_resume.sh).
# Frames of 64 values, so even these small models span several frames per
# partition and the "reads only what it owns" bound of the second phase bites.
add_executable(test_ckpt_resume ${_ck}/multirank/test_ckpt_resume.c
               ${_ck}/multirank/ckpt_harness.c ${_ck}/multirank/tied_model.c)
target_link_libraries(test_ckpt_resume PRIVATE zero-engine)
target_include_directories(test_ckpt_resume PRIVATE ${_ck}/multirank)
function(ds_ckpt_resume_test name k tol np1 s1 np2 s2 model precision dropout)
  set(work ${CMAKE_BINARY_DIR}/tests/${name})
  add_test(NAME ${name}
           COMMAND ${_ck}/multirank/test_ckpt_resume.sh $<TARGET_FILE:test_ckpt_resume> ${work}
                   ${k} ${tol} ${np1} ${s1} ${np2} ${s2} ${model} ${precision} ${dropout}
                   ${DS_MPIRUN} ${DS_MPIRUN_FLAGS} -x OMP_NUM_THREADS=1 -x DS_CKPT_FRAME_ELEMS)
  set(procs ${np1})
  if(np2 GREATER np1)
    set(procs ${np2})
  endif()
  set_tests_properties(${name} PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS ${procs}
                       ENVIRONMENT "OMP_NUM_THREADS=1;DS_CKPT_FRAME_ELEMS=64")
endfunction()

# Exact resume: 2 ranks, every stage, the MLP and a BERT with dropout 0.1
# (its masks come from the seed and the micro-step counter, both restored);
# fp16 (loss scaler with overflows and growth) and bf16. Tolerance 0: the
# losses, learning rates, loss scales and final parameters must be identical
# bit for bit to the straight run's.
foreach(stage 0 1 2 3)
  ds_ckpt_resume_test(ckpt_exact_mlp_stage${stage} 4 0 2 ${stage} 2 ${stage} mlp fp32 0)
  ds_ckpt_resume_test(ckpt_exact_bert_stage${stage} 3 0 2 ${stage} 2 ${stage} bert fp32 0.1)
endforeach()
ds_ckpt_resume_test(ckpt_exact_mlp_fp16_stage2 4 0 2 2 2 2 mlp fp16 0)
# A tied model (its table is also its output projection: stored once) at
# stage 3, where the table is gathered for both uses, and in fp16.
ds_ckpt_resume_test(ckpt_exact_tied_stage3 4 0 2 3 2 3 tied fp32 0)
ds_ckpt_resume_test(ckpt_exact_tied_fp16_stage2 4 0 2 2 2 2 tied fp16 0)
ds_ckpt_resume_test(ckpt_exact_mlp_bf16_stage3 4 0 2 3 2 3 mlp bf16 0)

# Elastic resume: N ranks at stage S save, M ranks at stage S' load; the
# second half is compared with a straight M-rank run at stage S'. The loaded
# parameters equal the saved ones bit for bit (checked exactly); what differs
# afterwards is only that the first K steps ran with N ranks' summation order
# (per-rank partial sums, then the ring) instead of M ranks'. That gap is the
# one tests/engine.cmake's equivalence tests bound: measured there at most
# 1e-7 relative over 20 steps, and 1e-5 is what they allow; the same bound
# holds here (a wrong re-cut, a lost moment or a data loader that restarts the
# epoch moves the loss by 1e-2 or more). Dropout is 0: masks are drawn per
# rank, so N and M ranks would drop different units.
ds_ckpt_resume_test(ckpt_elastic_2to1_mlp 4 1e-5 2 1 1 0 mlp fp32 0)
ds_ckpt_resume_test(ckpt_elastic_1to4_bert 3 1e-5 1 0 4 3 bert fp32 0)
ds_ckpt_resume_test(ckpt_elastic_4to2_mlp 4 1e-5 4 2 2 2 mlp fp32 0)
ds_ckpt_resume_test(ckpt_elastic_stage3to1_bert 3 1e-5 2 3 2 1 bert fp32 0)
ds_ckpt_resume_test(ckpt_elastic_tied_2to1_stage3to0 4 1e-5 2 3 1 0 tied fp32 0)

# Loading flags (module only, no optimizer, no scheduler), loading into a
# trained engine, and refusals that leave the engine untouched.
ds_add_mpi_test(NAME test_ckpt_flags SOURCES ${_ck}/multirank/test_ckpt_flags.c
                ${_ck}/multirank/ckpt_harness.c ${_ck}/multirank/tied_model.c NP 2 LABELS multirank)

# Nothing left behind: failed saves (injected write errors) remove their
# TAG.tmp, ds_checkpoint_clean removes stale ones, a failed zero_to_fp32
# removes its shards and the folders it made.
ds_add_mpi_test(NAME test_ckpt_leftovers SOURCES ${_ck}/multirank/test_ckpt_leftovers.c
                ${_ck}/multirank/ckpt_harness.c ${_ck}/multirank/tied_model.c NP 2 LABELS fault)

# Every byte of meta.json and latest checked by every reader: 600 edits of
# meta.json (random bytes and structural edits) and every byte of latest,
# refused by verify, convert, the HF export, load and client_state.
ds_add_test(NAME test_ckpt_mutate SOURCES ${_ck}/multirank/test_ckpt_mutate.c
            ${_ck}/multirank/ckpt_harness.c ${_ck}/multirank/tied_model.c LABELS fault)
add_dependencies(test_ckpt_mutate zero_to_fp32)

# zero_to_fp32 (library and program) against ds_get_param, and
# ds_checkpoint_verify on broken copies; then the independent Python reader
# checks the converter's files against ds_save_weights' (fixture).
ds_add_mpi_test(NAME test_ckpt_z2f SOURCES ${_ck}/multirank/test_ckpt_z2f.c
                ${_ck}/multirank/ckpt_harness.c ${_ck}/multirank/tied_model.c NP 2 LABELS multirank)
add_dependencies(test_ckpt_z2f zero_to_fp32)
set_tests_properties(test_ckpt_z2f_np2 PROPERTIES FIXTURES_SETUP ckpt_z2f)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME test_ckpt_z2f_python
           COMMAND ${Python3_EXECUTABLE} ${_ck}/tools/check_safetensors.py
                   ${CMAKE_BINARY_DIR}/tests/ckpt_z2f)
  set_tests_properties(test_ckpt_z2f_python PROPERTIES LABELS unit TIMEOUT 60
                       FIXTURES_REQUIRED ckpt_z2f)
endif()

# Crash safety: a rank SIGKILLs itself at each stage of a save (test-only
# fault points armed by DS_FAULT_INJECT, engine/io/fault.h); afterwards
# `latest` names a complete checkpoint that verifies and loads bit for bit,
# and the next save succeeds over the debris.
add_executable(test_ckpt_crash ${_ck}/fault/test_ckpt_crash.c ${_ck}/multirank/ckpt_harness.c
               ${_ck}/multirank/tied_model.c)
target_link_libraries(test_ckpt_crash PRIVATE zero-engine)
add_test(NAME test_ckpt_crash
         COMMAND ${_ck}/fault/test_ckpt_crash.sh $<TARGET_FILE:test_ckpt_crash>
                 ${CMAKE_BINARY_DIR}/tests/ckpt_crash ${DS_MPIRUN} ${DS_MPIRUN_FLAGS}
                 -x OMP_NUM_THREADS=1)
set_tests_properties(test_ckpt_crash PROPERTIES LABELS fault TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "OMP_NUM_THREADS=1")

# Crash consistency beyond SIGKILL: the system calls of a save, recorded by
# strace, follow the fsync-before-rename rule, and every fsync is needed
# (tests/fault/fsync_order.c leaves each out in turn). Skipped without strace.
add_executable(fsync_order ${_ck}/fault/fsync_order.c)
add_test(NAME test_ckpt_fsync
         COMMAND ${_ck}/fault/test_ckpt_fsync.sh $<TARGET_FILE:fsync_order>
                 $<TARGET_FILE:test_ckpt_crash> ${CMAKE_BINARY_DIR}/tests/ckpt_fsync ${DS_MPIRUN}
                 ${DS_MPIRUN_FLAGS} -x OMP_NUM_THREADS=1)
set_tests_properties(test_ckpt_fsync PROPERTIES LABELS fault TIMEOUT 120 PROCESSORS 2
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=1")

# Preemption keeps the work: train_cls through engine-run, stopped by
# SIGTERM / SIGUSR1 at 10 moments (to engine-run or a rank, twice, inside a
# save), exits 128 + the signal with a checkpoint, and --resume gives the
# losses and final weights of a run never stopped, bit for bit.
add_test(NAME test_preempt
         COMMAND ${_ck}/fault/test_preempt.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/preempt)
set_tests_properties(test_preempt PROPERTIES LABELS fault TIMEOUT 240 PROCESSORS 2)

# train_cls --save-steps / --resume end to end (tests/unit/test_train_cls_ckpt.sh).
add_test(NAME test_train_cls_ckpt
         COMMAND ${_ck}/unit/test_train_cls_ckpt.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/train_cls_ckpt ${DS_MPIRUN} ${DS_MPIRUN_FLAGS}
                 -x OMP_NUM_THREADS=1)
set_tests_properties(test_train_cls_ckpt PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "OMP_NUM_THREADS=1")

# One writer per checkpoint folder and bounded disk use: another process's
# lock refuses clean and save (naming its pid), a killed holder frees it,
# ds_checkpoint_prune keeps the newest K and latest's and nothing else goes.
ds_add_test(NAME test_ckpt_lock SOURCES ${_ck}/fault/test_ckpt_lock.c
            ${_ck}/multirank/ckpt_harness.c ${_ck}/multirank/tied_model.c LABELS fault)
target_include_directories(test_ckpt_lock PRIVATE ${_ck}/multirank)

# A full disk during a save and during zero_to_fp32 (tmpfs mounts; skipped
# with 77 where mounting is not allowed) and a file-size limit: one line with
# the path and the bytes, the last checkpoint intact and latest on it,
# nothing under a final name.
add_test(NAME test_disk_full
         COMMAND ${_ck}/fault/test_disk_full.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/disk_full)
set_tests_properties(test_disk_full PROPERTIES LABELS fault TIMEOUT 120 PROCESSORS 2
                     SKIP_RETURN_CODE 77)

# train_cls --retries: rank 1's NVMe swap failing at step 5 sends both ranks
# back to the last checkpoint in the same engine, and the run ends with the
# weights of one that never failed; without --retries, or past them, the job
# fails naming the step and the disk, as it does when the folder's only
# checkpoints are another run's. engine-run --max-restarts starts a job
# whose rank was killed again, and train_cls --resume ends it with the same
# weights (tests/fault/test_retries.sh).
add_test(NAME test_retries
         COMMAND ${_ck}/fault/test_retries.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/retries)
set_tests_properties(test_retries PROPERTIES LABELS fault TIMEOUT 120 PROCESSORS 2)

# A dead rank: 20 SIGKILLs of a random rank at start-up, while training and
# inside saves; each time the job ends within 15 s naming the rank, latest
# verifies and the next run resumes from it (tests/fault/test_kill_ranks.sh).
add_test(NAME test_kill_ranks
         COMMAND ${_ck}/fault/test_kill_ranks.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/kill_ranks 20)
set_tests_properties(test_kill_ranks PROPERTIES LABELS fault TIMEOUT 240 PROCESSORS 2)

# Two hosts without shared memory (tests/fault/test_two_hosts.sh, with
# tools/twohost.sh: two network namespaces, Open MPI over TCP only): train_cls
# across them checkpoints and resumes with the straight run's losses; a
# checkpoint folder one host does not see stops the job with one line naming
# the rank, its host and the folder. Skipped (77) where namespaces cannot be
# made. About 15 s here.
add_test(NAME test_two_hosts
         COMMAND ${_ck}/fault/test_two_hosts.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/two_hosts ${CMAKE_SOURCE_DIR}/tools/twohost.sh
                 $<TARGET_FILE:test_ckpt_resume>)
# Label nosan (tools/test_sanitize.sh leaves it out): under the sanitizers it
# ran 14.6 s, most of it TCP between namespaces; its code runs there through
# test_ckpt_resume (save and resume), test_ckpt_shared (the marker a host
# that does not see the folder fails on) and the launcher's hostfile tests.
# PROCESSORS 1: its two ranks keep a quarter of one core busy (measured alone),
# the rest is waiting on the link (launcher.cmake says why PROCESSORS counts
# busy cores).
set_tests_properties(test_two_hosts PROPERTIES LABELS "multirank;fault;nosan" TIMEOUT 120
                     PROCESSORS 1 SKIP_RETURN_CODE 77)
