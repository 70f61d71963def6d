# Language models: text/lm_text.h (documents, byte and char tokenizers,
# packing) and the bundled trainer tools/train_lm.
set(_lm_dir ${CMAKE_CURRENT_SOURCE_DIR})

# Every document format and its errors (path:line), the split by document,
# both tokenizers and their folder files, packing (each token after the
# first a target exactly once), the UTF-8 sanitizer.
ds_add_test(NAME test_lm_text SOURCES ${_lm_dir}/unit/test_lm_text.c LABELS unit)
# train_lm through engine-run on 2 ranks: training, the dev report, metrics,
# save + --init reload, resume, a SIGTERM and its resume, formats, sampling,
# errors (about 10 s).
add_test(NAME test_train_lm
         COMMAND sh ${_lm_dir}/unit/test_train_lm.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_CURRENT_BINARY_DIR}/train_lm_work)
set_tests_properties(test_train_lm PROPERTIES LABELS multirank TIMEOUT 120 PROCESSORS 2)
