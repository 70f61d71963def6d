# Monitors (engine/monitor/): config sections, the event file read back by a
# reader written in the test, DeepSpeed's CSV layout, the engine's scalars.
set(_mon ${CMAKE_CURRENT_SOURCE_DIR})
ds_add_test(NAME test_monitor SOURCES ${_mon}/unit/test_monitor.c
            ${_mon}/multirank/ckpt_harness.c ${_mon}/multirank/tied_model.c LABELS unit)
