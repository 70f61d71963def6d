# Rank 0's progress in train_cls and train_lm (tools/common/progress.h):
# plain lines in a log, a status line redrawn on a pseudo-terminal
# (script(1)), evaluation's own progress, once at 2 ranks (about 3 s).
add_test(NAME test_progress
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_progress.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/gen_sentences.csv
                 ${CMAKE_CURRENT_BINARY_DIR}/progress_work)
set_tests_properties(test_progress PROPERTIES LABELS multirank TIMEOUT 120 PROCESSORS 2
                     FIXTURES_REQUIRED gen_csv)

# --epochs at gradient accumulation 4 (train_cls, 2 ranks; train_lm's
# count): every row once an epoch, the short last step, exact resumes at and
# inside an epoch's end (about 15 s).
add_test(NAME test_trainer_epochs
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_trainer_epochs.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_CURRENT_BINARY_DIR}/trainer_epochs_work)
set_tests_properties(test_trainer_epochs PROPERTIES LABELS multirank TIMEOUT 180 PROCESSORS 2)

# What the trainers say: exit codes as --help states them, options named in
# file errors, --dev-ratio with --eval-data refused, empty documents
# counted, a lowered --eval-batch said, --metrics cut back at --resume
# (1 process each; about 10 s).
add_test(NAME test_trainer_cli
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_trainer_cli.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_CURRENT_BINARY_DIR}/trainer_cli_work)
set_tests_properties(test_trainer_cli PROPERTIES LABELS unit TIMEOUT 180)
