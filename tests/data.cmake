# engine/data and text/text*, tokenizer*: readers, split, sampler, batches,
# char vocab, WordPiece parity with transformers.
set(_data_dir ${CMAKE_CURRENT_SOURCE_DIR})

# Every format and every reader error (path:line), label options.
ds_add_test(NAME test_text_read SOURCES ${_data_dir}/unit/test_text_read.c LABELS unit)
# The BERT issue's protocol on the real NLPCC file: 12,715 / 11,443 / 1,272,
# the char vocab, the permutation against a Python reference.
ds_add_test(NAME test_text_nlpcc SOURCES ${_data_dir}/unit/test_text_nlpcc.c LABELS unit)
# Texts -> dataset rows, batch fill and masks, split edges.
ds_add_test(NAME test_text_dataset SOURCES ${_data_dir}/unit/test_text_dataset.c LABELS unit)
# DistributedSampler semantics at world 1..5.
ds_add_test(NAME test_sampler SOURCES ${_data_dir}/unit/test_sampler.c LABELS unit)
# Char vocab order, encode, vocab file round trip and errors.
ds_add_test(NAME test_tokenizer_char SOURCES ${_data_dir}/unit/test_tokenizer_char.c LABELS unit)
# WordPiece against BertTokenizer ids (tests/data/wordpiece/fixture.jsonl).
ds_add_test(NAME test_tokenizer_wordpiece SOURCES ${_data_dir}/unit/test_tokenizer_wordpiece.c
            LABELS unit)
