# Checkpoints (issue 5): shard files, meta.json, save/load, exact and elastic
# resume, crash safety, zero_to_fp32.
set(_ck ${CMAKE_CURRENT_SOURCE_DIR})

ds_add_test(NAME test_ckpt_file SOURCES ${_ck}/unit/test_ckpt_file.c LABELS unit)
target_link_libraries(test_ckpt_file PRIVATE PkgConfig::ZSTD)
