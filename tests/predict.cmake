# tools/predict: classify texts with a model saved by train_cls --save-dir.
# tests/unit/test_predict.sh drives the real programs, one case per test.
# The setup_* tests are CTest fixtures: they train tiny models (a char BERT,
# a char MLP, a WordPiece BERT fine-tuned from tests/data/bert_ref_tiny_hf,
# a char BERT saving ZeRO checkpoints) for 60 steps on gen_sentences data
# into the build tree; the other cases predict with them (case checkpoint:
# through zero_to_fp32, as predict --help tells).
set(_pd_fix ${CMAKE_CURRENT_BINARY_DIR}/predict_fixture)
set(_pd_work ${CMAKE_CURRENT_BINARY_DIR}/predict_work)

# ds_predict_case(NAME [SETUP fixture] [REQUIRED fixture...])
function(ds_predict_case name)
  cmake_parse_arguments(P "" "SETUP" "REQUIRED" ${ARGN})
  add_test(NAME predict_${name}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_predict.sh ${name}
                   $<TARGET_FILE:predict> $<TARGET_FILE:train_cls> $<TARGET_FILE:gen_sentences>
                   ${CMAKE_SOURCE_DIR} ${_pd_fix} ${_pd_work}/${name})
  set_tests_properties(predict_${name} PROPERTIES LABELS unit TIMEOUT 120
                       ENVIRONMENT "OMP_NUM_THREADS=1")
  if(P_SETUP)
    # The setups share the generated data file: one at a time writes it.
    set_tests_properties(predict_${name} PROPERTIES FIXTURES_SETUP ${P_SETUP}
                         RESOURCE_LOCK predict_fixture_data)
  endif()
  if(P_REQUIRED)
    set_tests_properties(predict_${name} PROPERTIES FIXTURES_REQUIRED "${P_REQUIRED}")
  endif()
endfunction()

ds_predict_case(setup_bert SETUP predict_bert)
ds_predict_case(setup_mlp SETUP predict_mlp)
ds_predict_case(setup_wordpiece SETUP predict_wordpiece)
ds_predict_case(setup_ckpt SETUP predict_ckpt)
foreach(c argv stdin batch weights_file max_seq_len usage)
  ds_predict_case(${c} REQUIRED predict_bert)
endforeach()
ds_predict_case(mlp REQUIRED predict_mlp)
ds_predict_case(wordpiece REQUIRED predict_wordpiece)
ds_predict_case(errors REQUIRED predict_bert predict_mlp)
ds_predict_case(checkpoint REQUIRED predict_ckpt)
