# Model kernels (engine/backend/nn*.h, cpu/nn_*.c) and the modules and
# models of models/ (owner: models). The gradient-check harness runs modules
# without the engine; the kernel tests borrow its deterministic RNG.
set(_models_dir ${CMAKE_CURRENT_SOURCE_DIR}/unit)
set(_models_harness ${_models_dir}/gradcheck_harness.c)

# Every cpu kernel of the ds_nn_ops table against double-precision references.
ds_add_test(NAME test_nn_kernels SOURCES ${_models_dir}/test_nn_kernels.c ${_models_harness}
            LABELS unit)
# Bad arguments refused before anything is written (sizes, Tq > T, a
# wrapping dropout counter, dropout_ln_fwd's outputs); test_nn_cuda checks
# cuda refuses the same calls with the same messages.
ds_add_test(NAME test_nn_refusals SOURCES ${_models_dir}/test_nn_refusals.c LABELS unit)
# Dropout statistics, mask regeneration, counter layout; the masked softmax.
ds_add_test(NAME test_nn_dropout SOURCES ${_models_dir}/test_nn_dropout.c ${_models_harness}
            LABELS unit)
# The dropout keep mask in bits: the stream's bits, the backward from it the
# same as from the stream, under every cpu variant this CPU runs.
ds_add_test(NAME test_nn_dropout_mask SOURCES ${_models_dir}/test_nn_dropout_mask.c LABELS unit)
# dropout_ln_fwd: bit for bit dropout_fwd then layernorm_fwd, every variant.
ds_add_test(NAME test_nn_dropout_ln SOURCES ${_models_dir}/test_nn_dropout_ln.c LABELS unit)
# Finite-difference gradient check of every module ...
ds_add_test(NAME test_gradcheck_modules
            SOURCES ${_models_dir}/test_gradcheck_modules.c ${_models_harness} LABELS unit)
# ... and of the whole MLP and a tiny BERT; recomputation is bit-identical.
ds_add_test(NAME test_gradcheck_models
            SOURCES ${_models_dir}/test_gradcheck_models.c ${_models_harness} LABELS unit)
# ds_linear_bias_fwd (the bias rows, then the GEMM adding to them) against
# double precision; without a bias, ds_linear_fwd's bits.
ds_add_test(NAME test_linear_bias SOURCES ${_models_dir}/test_linear_bias.c LABELS unit)
# Hugging Face names and shapes, BERT-mini's size, planning sizes, bad input.
# A user's model built wrong (a module twice, a callback or parameter
# missing, no loss last): refused by name, nothing freed twice.
ds_add_test(NAME test_model_check SOURCES ${_models_dir}/test_model_check.c LABELS unit)
ds_add_test(NAME test_models_build SOURCES ${_models_dir}/test_models_build.c ${_models_harness}
            LABELS unit)
