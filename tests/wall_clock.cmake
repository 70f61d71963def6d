# wall_clock_breakdown and the communication counters in train_cls at 2
# ranks: the prints, --metrics' "wall_clock" and per-step "comm", the
# end-of-run report; across two simulated hosts where namespaces can be made
# (tools/twohost.sh). About 3 s (5 with the two hosts).
add_test(NAME test_wall_clock
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_wall_clock.sh ${CMAKE_BINARY_DIR}/bin
                 ${CMAKE_BINARY_DIR}/tests/gen_sentences.csv
                 ${CMAKE_CURRENT_BINARY_DIR}/wall_clock_work ${CMAKE_SOURCE_DIR}/tools/twohost.sh)
set_tests_properties(test_wall_clock PROPERTIES LABELS multirank TIMEOUT 120 PROCESSORS 2
                     FIXTURES_REQUIRED gen_csv)
