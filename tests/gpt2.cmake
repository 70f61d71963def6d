# GPT-2 (GPT2LMHeadModel): its kernels (the tanh GELU, causal attention), its
# modules and model (models/mod_gpt2_*.c, models/gpt2.c), its Hugging Face
# config and weights, parity with transformers, and training at every ZeRO
# stage (owner: the GPT-2 work).
set(_gpt2_unit ${CMAKE_CURRENT_SOURCE_DIR}/unit)

# gelu_new and the causal softmax against double-precision references.
ds_add_test(NAME test_nn_decoder SOURCES ${_gpt2_unit}/test_nn_decoder.c
            ${_gpt2_unit}/gradcheck_harness.c LABELS unit)

# What ds_gpt2_create builds: GPT-2 small's 124M parameters from defaults, HF
# names, shapes and init, the tie, inputs; bad descriptors named.
ds_add_test(NAME test_gpt2_model SOURCES ${_gpt2_unit}/test_gpt2_model.c LABELS unit)

# Logits, loss, every gradient (wte's the sum of both uses) and the parameters
# after 3 AdamW steps against transformers' GPT2LMHeadModel
# (tests/data/gpt2_ref_tiny.bin, written by tools/make_gpt2_reference.py; read
# with the DSREF reader, checked with the BERT test's ref_parity.c).
ds_add_test(NAME test_gpt2_parity SOURCES ${_gpt2_unit}/test_gpt2_parity.c
            ${_gpt2_unit}/ref_dump.c ${_gpt2_unit}/ref_parity.c LABELS unit)

# config.json in and out; checkpoints in transformers' and the original gpt2
# layouts (buffers skipped, lm_head.weight as the tied wte) onto an engine.
ds_add_test(NAME test_hf_gpt2 SOURCES ${_gpt2_unit}/test_hf_gpt2.c ${_gpt2_unit}/ref_dump.c
            LABELS unit)

# The engine's export (ds_hf_gpt2_config_write + ds_save_weights) loads with
# transformers' GPT2LMHeadModel.from_pretrained: nothing missing, unexpected
# or mis-shaped (lm_head.weight tied, not stored), and the same logits. Needs
# a Python with torch and transformers (DS_HF_PYTHON; this machine's venv by
# default); without one the test reports SKIPPED (exit 77).
set(DS_HF_PYTHON "$ENV{DS_HF_PYTHON}" CACHE FILEPATH
    "Python with torch + transformers for test_gpt2_hf_export; empty: /root/venv/bin/python if present")
if(NOT DS_HF_PYTHON AND EXISTS /root/venv/bin/python)
  set(_gpt2_python /root/venv/bin/python)
else()
  set(_gpt2_python "${DS_HF_PYTHON}")
endif()
add_executable(gpt2_hf_export ${_gpt2_unit}/gpt2_hf_export.c ${_gpt2_unit}/ref_dump.c)
target_link_libraries(gpt2_hf_export PRIVATE zero-engine)
target_compile_definitions(gpt2_hf_export PRIVATE DS_TEST_DATA_DIR="${DS_TEST_DATA_DIR}")
add_test(NAME test_gpt2_hf_export
         COMMAND ${_gpt2_unit}/test_gpt2_hf_export.sh $<TARGET_FILE:gpt2_hf_export>
                 "${_gpt2_python}" ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_gpt2_hf.py)
set_tests_properties(test_gpt2_hf_export PROPERTIES LABELS unit TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=1")

# Training at ZeRO stages 0-3 on 1 and 2 ranks follows the single-rank stage-0
# loss curve; lm_head.weight stays transformer.wte.weight; activation
# checkpointing with dropout trains bit for bit. The 1-rank run writes the
# reference curve (fixture) that the 2-rank run checks.
set(_gpt2_ref ${CMAKE_BINARY_DIR}/tests/ref_gpt2_train.txt)
set(_gpt2_mr ${CMAKE_CURRENT_SOURCE_DIR}/multirank)
ds_add_mpi_test(NAME test_gpt2_train SOURCES ${_gpt2_mr}/test_gpt2_train.c NP 1
                LABELS multirank ARGS --write ${_gpt2_ref} TIMEOUT 120)
set_tests_properties(test_gpt2_train_np1 PROPERTIES FIXTURES_SETUP ref_gpt2_train)
ds_add_mpi_test(NAME test_gpt2_train SOURCES ${_gpt2_mr}/test_gpt2_train.c NP 2
                LABELS multirank ARGS --check ${_gpt2_ref} TIMEOUT 120)
set_tests_properties(test_gpt2_train_np2 PROPERTIES FIXTURES_REQUIRED ref_gpt2_train)
