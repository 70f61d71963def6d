# Config reader and learning-rate schedules (engine/core/config*.c, sched.c).
ds_add_test(NAME test_config_parse SOURCES unit/test_config_parse.c LABELS unit)
ds_add_test(NAME test_config_bad SOURCES unit/test_config_bad.c LABELS unit)
ds_add_test(NAME test_config_resolve SOURCES unit/test_config_resolve.c LABELS unit)
ds_add_test(NAME test_sched SOURCES unit/test_sched.c LABELS unit)
# "auto" and missing sections resolved as Hugging Face's Trainer integration
# does (HF's zero2/zero3 templates through hints), and the start-up summary.
ds_add_test(NAME test_config_hf SOURCES unit/test_config_hf.c LABELS unit)
