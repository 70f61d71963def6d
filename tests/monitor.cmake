# Monitors (engine/monitor/): config sections, the event file read back by a
# reader written in the test, DeepSpeed's CSV layout, the engine's scalars.
set(_mon ${CMAKE_CURRENT_SOURCE_DIR})
ds_add_test(NAME test_monitor SOURCES ${_mon}/unit/test_monitor.c
            ${_mon}/multirank/ckpt_harness.c ${_mon}/multirank/tied_model.c LABELS unit)
# train_cls with both monitors on: its event file read by TensorBoard's own
# reader (PyPI's tensorboard in a virtualenv; skipped, exit 77, where it is
# not installed) and by test_monitor's, which must agree value for value.
add_test(NAME test_monitor_tensorboard
         COMMAND ${_mon}/unit/test_monitor_tensorboard.sh ${CMAKE_BINARY_DIR}/bin
                 $<TARGET_FILE:test_monitor> ${CMAKE_BINARY_DIR}/tests/gen_sentences.csv)
set_tests_properties(test_monitor_tensorboard PROPERTIES LABELS unit TIMEOUT 180
                     SKIP_RETURN_CODE 77 FIXTURES_REQUIRED gen_csv)
# --eval-steps, --save-best, --early-stopping, --logging-steps in train_cls
# and train_lm (tools/common/train_habits.c), bad values included.
add_test(NAME test_train_habits
         COMMAND ${_mon}/unit/test_train_habits.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/gen_sentences.csv
                 ${CMAKE_CURRENT_BINARY_DIR}/train_habits_work "${DS_MPIRUN_FLAGS_STR}")
set_tests_properties(test_train_habits PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2
                     FIXTURES_REQUIRED gen_csv)
# tools/plot_metrics: a train_cls run's --metrics drawn, rendered by
# rsvg-convert (skipped, 77, without it), bad input refused.
add_test(NAME test_plot_metrics
         COMMAND ${_mon}/unit/test_plot_metrics.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/gen_sentences.csv "${DS_MPIRUN_FLAGS_STR}")
set_tests_properties(test_plot_metrics PROPERTIES LABELS multirank TIMEOUT 180 PROCESSORS 2
                     SKIP_RETURN_CODE 77 FIXTURES_REQUIRED gen_csv)
