# engine/comm: rank discovery, the MPI ring collectives, timeouts.
set(_comm_dir ${CMAKE_CURRENT_SOURCE_DIR})

ds_add_test(NAME test_discover SOURCES ${_comm_dir}/unit/test_discover.c LABELS unit)
ds_add_test(NAME test_comm_reduce SOURCES ${_comm_dir}/unit/test_comm_reduce.c LABELS unit)

# Every collective x dtype x op x size, in place and not, default and tiny
# scratch, traffic against theory: at 1, 2 and 4 ranks under mpirun ...
foreach(np 1 2 4)
  ds_add_mpi_test(NAME test_comm SOURCES ${_comm_dir}/multirank/test_comm.c NP ${np}
                  LABELS multirank TIMEOUT 240)
endforeach()
if(DS_CUDA) # the CUDA module exists: asking for nccl no longer fails as "no CUDA"
  target_compile_definitions(test_comm PRIVATE DS_HAVE_CUDA=1)
endif()
# The same with staging (ds_comm_desc.stage, engine/comm/staged.c): every
# call copies through the backend's host memory around MPI's, here over the
# cpu backend (the cuda backend's run, test_comm_staged_cuda, is below).
foreach(np 1 2) # one rank: no host copies, an out-of-place call one device copy
  ds_add_mpi_test(NAME test_comm_staged SOURCES ${_comm_dir}/multirank/test_comm.c NP ${np}
                  LABELS multirank TIMEOUT 240)
endforeach()
target_compile_definitions(test_comm_staged PRIVATE DS_TEST_STAGED=1)
if(DS_CUDA)
  target_compile_definitions(test_comm_staged PRIVATE DS_HAVE_CUDA=1)
endif()
# The traffic counters of the comm front door (calls, sizes, bytes inside and
# across hosts, time, time waited) at 1 and 2 ranks on this host.
foreach(np 1 2)
  ds_add_mpi_test(NAME test_comm_counters SOURCES ${_comm_dir}/multirank/test_comm_counters.c
                  NP ${np} LABELS multirank TIMEOUT 60)
endforeach()
# The communication thread's FIFO: gates, forced opens, teardown dropping a
# closed gate and all behind it, the first failure reported by every later
# job; threaded and inline.
foreach(np 1 2)
  ds_add_mpi_test(NAME test_comm_worker SOURCES ${_comm_dir}/multirank/test_comm_worker.c
                  NP ${np} LABELS multirank TIMEOUT 60)
endforeach()
# Checked collectives: matched calls of every kind, and each kind of
# mismatch failing every rank at once with both calls named, at 1, 2 and 3
# ranks (3: the odd rank is not rank 1, and the split has a group of one).
foreach(np 1 2 3)
  ds_add_mpi_test(NAME test_comm_check SOURCES ${_comm_dir}/multirank/test_comm_check.c
                  NP ${np} LABELS multirank TIMEOUT 60)
endforeach()
# ... and once as a plain process (Open MPI singleton init), no launcher.
add_test(NAME test_comm_singleton COMMAND test_comm)
set_tests_properties(test_comm_singleton PROPERTIES LABELS multirank TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1")

# Rank 0 skips a collective; rank 1 must fail with DS_ERR_TIMEOUT after its
# 2 s deadline and both must exit: rank 1 with MPI_Abort, never MPI_Finalize
# (the 60 s limit catches a hang).
ds_add_mpi_test(NAME test_comm_timeout SOURCES ${_comm_dir}/fault/test_comm_timeout.c NP 2
                LABELS fault TIMEOUT 60)

# A rank out of a collective at 4 ranks: every other rank names it, not the
# live peer it waits for (a roll call after the timeout), also for MPI's own
# collectives and in the job's numbering on a split.
ds_add_mpi_test(NAME test_comm_rollcall SOURCES ${_comm_dir}/fault/test_comm_rollcall.c NP 4
                LABELS fault TIMEOUT 90)

# A hung rank ends the job with its name, a slow one does not: train_cls at
# 2 ranks through engine-run with comm_timeout_s 5; rank 1 stopped (SIGSTOP),
# stuck computing (DS_FAULT_INJECT=stall:...), or stopped for 1.5 s only
# (tests/fault/test_hung_rank.sh).
foreach(c stop compute slow)
  add_test(NAME test_hung_rank_${c}
           COMMAND ${_comm_dir}/fault/test_hung_rank.sh ${CMAKE_BINARY_DIR}/bin
                   ${CMAKE_BINARY_DIR}/tests/hung_rank_${c} ${c})
  set_tests_properties(test_hung_rank_${c} PROPERTIES LABELS "multirank;fault" TIMEOUT 120
                       PROCESSORS 2)
endforeach()
# Label nosan (tools/test_sanitize.sh leaves these out): stop and slow run the
# same watchdog and report code as compute, which the sanitizer run keeps;
# they differ in how rank 1 stalls, and their 6.5 s each are deadline waits.
set_tests_properties(test_hung_rank_stop test_hung_rank_slow PROPERTIES
                     LABELS "multirank;fault;nosan")
# stop's two ranks are a stopped process and one waiting for the deadline (a
# quarter of a core, measured alone): PROCESSORS 1, as launcher.cmake's waits.
set_tests_properties(test_hung_rank_stop PROPERTIES PROCESSORS 1)

# A rank that exits with a failure on its own ends the job within the exit
# handler's grace (10 s), not after comm_timeout_s (100 s here); ranks that
# fail together still finalise without an abort (tests/fault/test_lone_exit.sh).
add_executable(test_lone_exit ${_comm_dir}/fault/test_lone_exit.c)
target_link_libraries(test_lone_exit PRIVATE zero-engine)
add_test(NAME test_lone_exit
         COMMAND ${_comm_dir}/fault/test_lone_exit.sh ${CMAKE_BINARY_DIR}/bin
                 $<TARGET_FILE:test_lone_exit> ${CMAKE_BINARY_DIR}/tests/lone_exit)
set_tests_properties(test_lone_exit PROPERTIES LABELS "multirank;fault" TIMEOUT 120 PROCESSORS 2)

# The same program against the NCCL communicator, every buffer staged through
# device memory: needs a GPU (label cuda), so only in CUDA builds.
if(DS_CUDA)
  ds_add_mpi_test(NAME test_comm_nccl SOURCES ${_comm_dir}/multirank/test_comm.c NP 1
                  LABELS cuda TIMEOUT 240)
  target_compile_definitions(test_comm_nccl PRIVATE DS_TEST_NCCL=1 DS_HAVE_CUDA=1)
  target_link_libraries(test_comm_nccl PRIVATE CUDA::cudart)
  # No usable GPU: the program exits 77 and mpirun passes that code on.
  set_tests_properties(test_comm_nccl_np1 PROPERTIES SKIP_RETURN_CODE 77)
  # MPI staged through host memory over the cuda backend: two ranks on GPU 0,
  # which NCCL refuses (zero_engine.comm "mpi").
  foreach(np 1 2)
    ds_add_mpi_test(NAME test_comm_staged_cuda SOURCES ${_comm_dir}/multirank/test_comm.c
                    NP ${np} LABELS cuda TIMEOUT 240)
  endforeach()
  target_compile_definitions(test_comm_staged_cuda PRIVATE DS_TEST_STAGED=1 DS_TEST_CUDA=1
                             DS_HAVE_CUDA=1)
  target_link_libraries(test_comm_staged_cuda PRIVATE CUDA::cudart)
  set_tests_properties(test_comm_staged_cuda_np1 test_comm_staged_cuda_np2 PROPERTIES
                       SKIP_RETURN_CODE 77)
endif()

# Who initialises and finalises MPI; thread level and world checks. One
# scenario per process, each a plain process (singleton).
ds_add_test(NAME test_comm_init SOURCES ${_comm_dir}/multirank/test_comm_init.c
            LABELS multirank ARGS owned)
foreach(mode user funneled mismatch)
  add_test(NAME test_comm_init_${mode} COMMAND test_comm_init ${mode})
  set_tests_properties(test_comm_init_${mode} PROPERTIES LABELS multirank TIMEOUT 60
                       ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()
set_tests_properties(test_comm_init_mismatch PROPERTIES LABELS fault)
