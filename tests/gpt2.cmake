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
# with the BERT test's DSREF reader).
ds_add_test(NAME test_gpt2_parity SOURCES ${_gpt2_unit}/test_gpt2_parity.c
            ${_gpt2_unit}/bert_ref.c LABELS unit)

# config.json in and out; checkpoints in transformers' and the original gpt2
# layouts (buffers skipped, lm_head.weight as the tied wte) onto an engine.
ds_add_test(NAME test_hf_gpt2 SOURCES ${_gpt2_unit}/test_hf_gpt2.c ${_gpt2_unit}/bert_ref.c
            LABELS unit)
