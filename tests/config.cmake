# Config reader and learning-rate schedules (engine/core/config*.c, sched.c).
ds_add_test(NAME test_config_parse SOURCES unit/test_config_parse.c LABELS unit)
ds_add_test(NAME test_config_bad SOURCES unit/test_config_bad.c LABELS unit)
ds_add_test(NAME test_config_resolve SOURCES unit/test_config_resolve.c LABELS unit)
ds_add_test(NAME test_sched SOURCES unit/test_sched.c LABELS unit)
# "auto" and missing sections resolved as Hugging Face's Trainer integration
# does (HF's zero2/zero3 templates through hints), and the start-up summary.
ds_add_test(NAME test_config_hf SOURCES unit/test_config_hf.c LABELS unit)
# train_cls with HF's ds_config_zero2.json and --batch: the short start-up
# print naming each value's source, ds_config.resolved.json, --print-config,
# missing sections filled from the flags, one line per mistake.
add_test(NAME test_config_trainer
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_config_trainer.sh ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(test_config_trainer PROPERTIES LABELS unit TIMEOUT 120)
