# bench/'s table script: the statistics that bench/RESULTS.md's quality
# sections report, worked out by hand on a small work folder.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME test_quality_table
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/test_quality_table.py
                   ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_quality_table PROPERTIES LABELS unit TIMEOUT 60)
  # bench/gpu_compare.py, the judge of tools/gpu_check.sh (a GPU's checks):
  # CI has no GPU, so its verdicts are checked here on written metrics files.
  add_test(NAME test_gpu_compare
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/test_gpu_compare.py
                   ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_gpu_compare PROPERTIES LABELS unit TIMEOUT 60)
  # bench/ncu_summary.py, which reads gpu_check.sh's ncu phase: on a written CSV.
  add_test(NAME test_ncu_summary
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/test_ncu_summary.py
                   ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_ncu_summary PROPERTIES LABELS unit TIMEOUT 60)
  # bench/step_profile.py, which sorts the step's perf samples into GEMM and
  # the rest (bench/step_profile.sh): on a written perf script.
  add_test(NAME test_step_profile
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/test_step_profile.py
                   ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_step_profile PROPERTIES LABELS unit TIMEOUT 60)
else()
  message(WARNING "python3 not found: test_quality_table is not registered")
endif()

# bench_train --gemm-replay: the GEMM calls it records add up to the matmul
# FLOPs bench_train counts from the model's shapes, and both replays run.
if(DS_BENCH)
  add_test(NAME test_gemm_replay
           COMMAND ${CMAKE_SOURCE_DIR}/tests/unit/test_gemm_replay.sh $<TARGET_FILE:bench_train>)
  set_tests_properties(test_gemm_replay PROPERTIES LABELS unit TIMEOUT 120
                       ENVIRONMENT "OMP_NUM_THREADS=1")
  # bench_train --cut ab (the bf16 k cut's A/B in one process) runs and
  # reports its pairs, and where its CPUs sat (the core-to-core round trip
  # around the timed steps, bench/core_rtt.h: a number where it may run on 2
  # CPUs or more, counted by nproc without OMP_NUM_THREADS, which nproc would
  # print instead); a bad combination is refused with exit 2
  add_test(NAME test_bench_cut_ab
           COMMAND sh -c "out=$($0 --stage 0 --steps 2 --warmup 1 --precision bf16 --cut ab) && echo \"$out\" | grep -q 'k cut ab: step time without / with the cut [0-9.]* (median of 1 pairs' && rt='round trip [1-9][0-9]* ns before the timed steps, [1-9][0-9]* ns after' && { [ $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) -ge 2 ] || rt='round trip not measured'; } && echo \"$out\" | grep -q \"$rt\" && { $0 --steps 2 --cut ab --overlap ab >/dev/null 2>&1; test $? -eq 2; }"
                   $<TARGET_FILE:bench_train>)
  set_tests_properties(test_bench_cut_ab PROPERTIES LABELS unit TIMEOUT 120
                       ENVIRONMENT "OMP_NUM_THREADS=2")
  # bench_train --attn-chunk-bytes sets the attention's chunk size and says so;
  # a negative size is refused with exit 2
  add_test(NAME test_bench_attn_chunk
           COMMAND sh -c "$0 --stage 0 --steps 1 --warmup 0 --attn-chunk-bytes 1048576 | grep -q 'attention in chunks of 1048576 bytes (the backend.s own: 524288)' && { $0 --steps 1 --attn-chunk-bytes -1 >/dev/null 2>&1; test $? -eq 2; }"
                   $<TARGET_FILE:bench_train>)
  set_tests_properties(test_bench_attn_chunk PROPERTIES LABELS unit TIMEOUT 120
                       ENVIRONMENT "OMP_NUM_THREADS=2")
  # bench_lm --chunks ab (GPT-2's attention in chunks or over the whole
  # batch, alternate steps of one process) reports its pairs (one pair: its
  # ratio is the median, the least and the greatest) and, as bench_train, the
  # core-to-core round trip around its timed steps; one timed step is
  # refused with exit 2
  add_test(NAME test_bench_lm_chunks_ab
           COMMAND sh -c "set -- $0 --layers 1 --hidden 64 --heads 4 --vocab 256 --positions 128 --seq 128 --batch 8; out=$(\"$@\" --steps 2 --warmup 1 --chunks ab) && echo \"$out\" | grep -Eq 'chunks ab: step time without / with the chunks ([0-9.]+) \\(median of 1 pairs, min \\1, max \\1\\)' && rt='bench_lm: core-to-core round trip [1-9][0-9]* ns before the timed steps, [1-9][0-9]* ns after' && { [ $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) -ge 2 ] || rt='round trip not measured'; } && echo \"$out\" | grep -q \"$rt\" && { \"$@\" --steps 1 --chunks ab >/dev/null 2>&1; test $? -eq 2; }"
                   $<TARGET_FILE:bench_lm>)
  set_tests_properties(test_bench_lm_chunks_ab PROPERTIES LABELS unit TIMEOUT 120
                       ENVIRONMENT "OMP_NUM_THREADS=2")
endif()
