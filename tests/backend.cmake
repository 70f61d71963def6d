# Compute backend (engine/backend/): conversions, GEMM, RNG, element-wise
# kernels and optimizer updates of the cpu backend. Each test also runs the
# element-wise slots at 2 threads to check they give the same bits as at 1.
ds_add_test(NAME test_dtype SOURCES unit/test_dtype.c LABELS unit)
ds_add_test(NAME test_backend_gemm SOURCES unit/test_backend_gemm.c LABELS unit)
# the same under OpenBLAS's Haswell kernels (AVX2 + FMA, 12-row unit), which
# an AVX-512 host would not pick itself; 77 (skipped) on a CPU without them
add_test(NAME test_backend_gemm_haswell COMMAND test_backend_gemm)
set_tests_properties(test_backend_gemm_haswell PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_CORETYPE=Haswell"
                     SKIP_RETURN_CODE 77)
# bf16 GEMM inputs (mixed precision's GEMMs): the rounding, the same bits as
# the fp32 GEMM on pre-rounded inputs, the bound against double, the workspace.
ds_add_test(NAME test_backend_gemm_bf16 SOURCES unit/test_backend_gemm_bf16.c LABELS unit)
# bf16 GEMMs on the CPU's dot-product instruction (AVX512-BF16): exits 77,
# reported as skipped, on a CPU or build without it
ds_add_test(NAME test_gemm_dot SOURCES unit/test_gemm_dot.c LABELS unit)
set_tests_properties(test_gemm_dot PROPERTIES SKIP_RETURN_CODE 77)
# ... and from the engine: bf16 training with bf16 GEMMs differs from forced
# fp32 GEMMs and stays within a band of it; the config key's refusals.
ds_add_test(NAME test_gemm_bf16_train LABELS unit
            SOURCES unit/test_gemm_bf16_train.c multirank/ckpt_harness.c multirank/tied_model.c)
# ... and their workspace: reserved at ds_initialize from the modules'
# declared GEMMs, in the memory report and the estimate alike, exactly the
# largest request, nothing grown by the steps (with offload_optimizer too).
ds_add_test(NAME test_gemm_workspace LABELS unit
            SOURCES unit/test_gemm_workspace.c multirank/ckpt_harness.c multirank/tied_model.c)
ds_add_test(NAME test_backend_rng SOURCES unit/test_backend_rng.c LABELS unit)
ds_add_test(NAME test_backend_elementwise SOURCES unit/test_backend_elementwise.c LABELS unit)
ds_add_test(NAME test_backend_optim SOURCES unit/test_backend_optim.c LABELS unit)
# A thread marked ds_backend_thread_serial (the communication worker) starts
# no OpenMP team of its own beside the model's.
ds_add_test(NAME test_backend_thread_serial SOURCES unit/test_backend_thread_serial.c LABELS unit)
# Blockwise int8 of ZeRO++ qwZ: the round-trip bound per block, NaN / inf, threads.
ds_add_test(NAME test_quant SOURCES unit/test_quant.c LABELS unit)
# the row-sparse gradients' slots by hand (unit/test_rows.c)
ds_add_test(NAME test_rows SOURCES unit/test_rows.c LABELS unit)

# The CUDA module is opened at run time: without it, cuda is refused with a
# clear message and "auto" runs on cpu.
ds_add_test(NAME test_backend_plugin SOURCES unit/test_backend_plugin.c LABELS unit)
# a module with this interface number and another struct layout, refused at load
add_library(stub_cuda_plugin MODULE ${CMAKE_CURRENT_SOURCE_DIR}/unit/stub_cuda_plugin.c)
target_include_directories(stub_cuda_plugin PRIVATE ${CMAKE_SOURCE_DIR})
target_compile_definitions(test_backend_plugin PRIVATE
                           DS_STUB_PLUGIN="$<TARGET_FILE:stub_cuda_plugin>")
add_dependencies(test_backend_plugin stub_cuda_plugin)
if(DS_CUDA)
  target_compile_definitions(test_backend_plugin PRIVATE DS_HAVE_CUDA=1)
endif()

# A CPU run maps no CUDA library: /proc/self/maps after a step on backend
# cpu, and on "auto" falling back to cpu (which closes the module again).
# In a DS_CUDA=ON build it first shows the scan sees the module when open.
ds_add_test(NAME test_no_cuda_mapped SOURCES unit/test_no_cuda_mapped.c LABELS unit)
if(DS_CUDA)
  add_dependencies(test_no_cuda_mapped zero-engine-cuda)
endif()
# ... and links none: ldd on every program and libzero-engine.so (.ci/run runs
# the same script on its DS_CUDA=ON build). Label unit: it reads files only.
add_test(NAME test_no_cuda_linked
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_no_cuda_linked.sh ${CMAKE_BINARY_DIR})
set_tests_properties(test_no_cuda_linked PROPERTIES LABELS unit TIMEOUT 60)

# The cuda backend against the cpu backend, slot by slot (bit for bit where
# the arithmetic is shared). Needs a GPU: exits 77, reported as skipped,
# where none is visible, so a CUDA build on a machine without one stays green.
if(DS_CUDA)
  ds_add_test(NAME test_backend_cuda SOURCES unit/test_backend_cuda.cu LABELS cuda)
  # the CUDA module itself (built beside the library, opened by it at run time)
  target_compile_definitions(test_backend_cuda PRIVATE DS_HAVE_CUDA=1)
  target_link_libraries(test_backend_cuda PRIVATE zero-engine-cuda CUDA::cudart)
  set_tests_properties(test_backend_cuda PROPERTIES SKIP_RETURN_CODE 77)
endif()

# The cuda model kernels (be->nn) against the cpu ones, slot by slot: bit for
# bit where the element arithmetic is shared, within a derived bound where a
# reduction runs in another order. Needs a GPU: exits 77 (skipped) without.
if(DS_CUDA)
  ds_add_test(NAME test_nn_cuda SOURCES unit/test_nn_cuda.cu unit/nn_cuda_reductions.cu
              LABELS cuda)
  target_compile_definitions(test_nn_cuda PRIVATE DS_HAVE_CUDA=1)
  target_link_libraries(test_nn_cuda PRIVATE zero-engine-cuda CUDA::cudart)
  set_tests_properties(test_nn_cuda PROPERTIES SKIP_RETURN_CODE 77)
endif()

# The instruction-set variants of the cpu kernels (engine/backend/cpu/cpu_isa.h)
# against each other, bit for bit, for every variant this CPU runs.
ds_add_test(NAME test_cpu_isa SOURCES unit/test_cpu_isa.c LABELS unit)
set_tests_properties(test_cpu_isa PROPERTIES SKIP_RETURN_CODE 77)

# Accuracy of the vectorised exp / erf / GELU math of the model kernels against
# libm, under every variant this CPU runs, and their agreement in bits.
ds_add_test(NAME test_vmath SOURCES unit/test_vmath.c LABELS unit)

# Whole training steps (small BERT, stage 2, 2 ranks) under each variant this
# CPU runs: the same loss bits every step.
ds_add_mpi_test(NAME test_cpu_isa_train NP 2 LABELS multirank
                SOURCES unit/test_cpu_isa_train.c multirank/ckpt_harness.c multirank/tied_model.c)
set_tests_properties(test_cpu_isa_train_np2 PROPERTIES SKIP_RETURN_CODE 77)
