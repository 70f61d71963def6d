# GPT-2 (GPT2LMHeadModel): its kernels (the tanh GELU, causal attention), its
# modules and model (models/mod_gpt2_*.c, models/gpt2.c), its Hugging Face
# config and weights, parity with transformers, and training at every ZeRO
# stage (owner: the GPT-2 work).
set(_gpt2_unit ${CMAKE_CURRENT_SOURCE_DIR}/unit)

# gelu_new and the causal softmax against double-precision references.
ds_add_test(NAME test_nn_decoder SOURCES ${_gpt2_unit}/test_nn_decoder.c
            ${_gpt2_unit}/gradcheck_harness.c LABELS unit)
