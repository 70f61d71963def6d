# A run that cannot learn stops with its reason: non-finite gradients past
# zero_engine.max_consecutive_skips (fp32, bf16) or at fp16.min_loss_scale,
# and NaN/inf weights refused where they come in (ds_set_param, a Hugging
# Face folder, train_cls --init, a save, a load, zero_to_fp32).
ds_add_test(NAME test_nonfinite SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_nonfinite.c
            ${CMAKE_CURRENT_SOURCE_DIR}/multirank/ckpt_harness.c
            ${CMAKE_CURRENT_SOURCE_DIR}/multirank/tied_model.c LABELS unit)
add_dependencies(test_nonfinite train_cls)

# The --metrics line stays JSON (null + "nonfinite" for NaN and inf).
ds_add_test(NAME test_trainer_common SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_trainer_common.c
            LABELS unit)
target_link_libraries(test_trainer_common PRIVATE ds_tool_common)

# --resume cuts the --metrics file back to the resumed step (retry lines,
# re-made evaluations, a line cut by the kill).
ds_add_test(NAME test_metrics_resume SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_metrics_resume.c
            LABELS unit)
target_link_libraries(test_metrics_resume PRIVATE ds_tool_common)
