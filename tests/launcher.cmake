# Tests of the launcher engine-run, the data generator gen_sentences and
# tools/fetch_data.sh. They are shell scripts driving the real programs
# (tests/unit/test_*.sh); each case is its own test. Label unit; rank_dies is
# also a fault test (a rank fails and the job must end).

# A stand-in APP: prints the rank and world a launcher gave it.
add_executable(rank_echo ${CMAKE_CURRENT_SOURCE_DIR}/unit/rank_echo.c)
# An APP on the library: joins late, trains until a preemption signal.
add_executable(launch_probe ${CMAKE_CURRENT_SOURCE_DIR}/unit/launch_probe.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/ckpt_harness.c
               ${CMAKE_CURRENT_SOURCE_DIR}/multirank/tied_model.c)
target_link_libraries(launch_probe PRIVATE zero-engine)

set(_ds_launch_work ${CMAKE_CURRENT_BINARY_DIR}/launcher_work)
foreach(c help dry_np1 dry_np2 dry_np4 dry_hostfile dry_mpi_env dry_slurm dry_nodes blas_core
          launcher_none no_mpirun errors run_np1 run_np2 rank_dies oversubscribe join relay
          relay_unhandled mpirun_hangs)
  add_test(NAME launcher_${c}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_run.sh ${c}
                   $<TARGET_FILE:engine-run> $<TARGET_FILE:rank_echo> ${_ds_launch_work}/${c}
                   $<TARGET_FILE:launch_probe>)
  set_tests_properties(launcher_${c} PROPERTIES LABELS unit TIMEOUT 90)
endforeach()
# These start two ranks each.
set_tests_properties(launcher_run_np2 launcher_rank_dies launcher_join launcher_relay
                     launcher_relay_unhandled PROPERTIES PROCESSORS 2)
set_tests_properties(launcher_relay launcher_relay_unhandled PROPERTIES LABELS "unit;fault")
set_tests_properties(launcher_rank_dies launcher_mpirun_hangs PROPERTIES LABELS "unit;fault")

# engine-run's output relay on streams shaped like mpirun --tag-output's:
# tags off, each rank's lines whole, an error every rank prints shown once,
# mpirun's failure banners as one line naming the rank.
ds_add_test(NAME test_output_relay SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_output_relay.c
            LABELS unit)
target_link_libraries(test_output_relay PRIVATE ds_tool_common)

# engine-run's watch of which local rank ended first, with the test as
# mpirun: a rank killed and reaped before any scan, a zombie whose rank was
# never read, a child seen before its exec (tools/common/rank_watch.h).
ds_add_test(NAME test_rank_watch SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rank_watch.c
            LABELS unit)
target_link_libraries(test_rank_watch PRIVATE ds_tool_common)

# One error, once: a bad config, a bad data line, a locked checkpoint folder
# at 2 and 4 ranks through engine-run; the message once, no mpirun banner.
add_test(NAME test_one_error
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/fault/test_one_error.sh ${CMAKE_BINARY_DIR}/bin
                 ${_ds_launch_work}/one_error)
set_tests_properties(test_one_error PROPERTIES LABELS "unit;fault" TIMEOUT 120 PROCESSORS 2)

add_test(NAME gen_sentences
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_gen_sentences.sh
                 $<TARGET_FILE:gen_sentences> ${_ds_launch_work}/gen_sentences)
set_tests_properties(gen_sentences PROPERTIES LABELS unit TIMEOUT 60)

foreach(c convert offline broken)
  add_test(NAME fetch_data_${c}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_fetch_data.sh ${c}
                   ${CMAKE_SOURCE_DIR}/tools/fetch_data.sh $<TARGET_FILE:gen_sentences>
                   ${_ds_launch_work}/fetch_data_${c})
  set_tests_properties(fetch_data_${c} PROPERTIES LABELS unit TIMEOUT 90)
endforeach()

# One job from one launcher per node, torchrun-style (engine-run --nnodes
# --node-rank --master-addr --master-port --nproc-per-node, and the RANK /
# WORLD_SIZE / MASTER_* environment; tests/fault/test_nodes.sh): the losses
# of engine-run --np, a master that is wrong, busy or alone, a node rank out of
# range or given twice, a node whose rank dies, and two network namespaces
# (tools/twohost.sh; skipped, 77, where they cannot be made). Each launcher
# ends within its timeout with one line, nothing left running. 2-12 s each.
foreach(c np1x2 np2x2 env never bad_addr port_busy rank_range duplicate node_dies node_pipe
          two_hosts)
  add_test(NAME launcher_nodes_${c}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/fault/test_nodes.sh ${CMAKE_BINARY_DIR}/bin
                   ${_ds_launch_work}/nodes_${c} ${CMAKE_SOURCE_DIR}/tools/twohost.sh ${c})
  set_tests_properties(launcher_nodes_${c} PROPERTIES LABELS "multirank;fault" TIMEOUT 90
                       PROCESSORS 2 SKIP_RETURN_CODE 77)
  # Under the sanitizers (tools/test_sanitize.sh) these run with AddressSanitizer and
  # UndefinedBehaviorSanitizer but without LeakSanitizer: on the CI host its tracer crashed
  # at every rank's exit in np1x2, np2x2, env and two_hosts, twice each ("Tracer caught
  # signal 11" in __lsan::ScanRangeForPointers, address 0x3bc8, in a plain engine-run --np
  # 2 run that trained and ended well), and once in four here; never reproduced alone. That
  # is the leak checker failing, not a finding. The ranks' code is the same as in the
  # launcher_* and multirank tests, which keep the leak check; what only these reach (the
  # join, engine/comm/join.c) keeps ASan's checks of every access.
  if(DS_SANITIZE)
    set_tests_properties(launcher_nodes_${c} PROPERTIES
                         ENVIRONMENT_MODIFICATION "ASAN_OPTIONS=string_append::detect_leaks=0")
  endif()
endforeach()
# Label nosan (tools/test_sanitize.sh leaves it out): never is three waits of
# the rendezvous deadline (12.7 s under the sanitizers). The master's side of
# that timeout runs under them in bad_addr and rank_range; what only never
# reaches is the other side, a connect retried until the deadline, and the
# same wait in train_cls's RANK/WORLD_SIZE form.
set_tests_properties(launcher_nodes_never PROPERTIES LABELS "multirank;fault;nosan")
# PROCESSORS counts the cores a test keeps busy, not the processes it starts
# (tests/CMakeLists.txt halves it, except for fault tests): these fault tests
# wait on deadlines and refused connections with both ranks idle (0.13-0.34 of
# a core on average, measured alone from /proc/stat), so they declare 1 and
# ctest runs another test beside them instead of leaving a core unused.
set_tests_properties(launcher_nodes_never launcher_nodes_bad_addr launcher_nodes_rank_range
                     launcher_nodes_node_pipe launcher_nodes_port_busy launcher_relay
                     PROPERTIES PROCESSORS 1)
