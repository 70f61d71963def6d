# Language models: models/lm_text.h (documents, byte and char tokenizers,
# packing) and the bundled trainer tools/train_lm.
set(_lm_dir ${CMAKE_CURRENT_SOURCE_DIR})

# Every document format and its errors (path:line), the split by document,
# both tokenizers and their folder files, packing (each token after the
# first a target exactly once), the UTF-8 sanitizer.
ds_add_test(NAME test_lm_text SOURCES ${_lm_dir}/unit/test_lm_text.c LABELS unit)
