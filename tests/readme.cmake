# The README is executable: tests/unit/test_readme.sh runs every sh block of
# README.md as written (the quickstart's full build among them) in a copy of
# the source tree under this build folder, and checks its C blocks against
# the files they come from, its json blocks through this build's config reader
# (zero_estimate --config, DS_README_BIN) and its listings against what the
# programs write. Offline, what needs no network is still checked first.
# Label readme, not unit: tools/test_sanitize.sh runs -L 'unit|multirank' in a
# sanitizer build, where a second full build of the tree would add minutes
# and check nothing new. PROCESSORS 2: it builds with -j 2 and starts 2 ranks
# (1.5 cores on average, which tests/CMakeLists.txt halves to 1). COST: the
# longest test (about 2 minutes) starts first, beside the others, instead of
# alone at the end of the run.
add_test(NAME test_readme
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_readme.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR}/readme_test "${DS_MINILM_DIR}")
set_tests_properties(test_readme PROPERTIES LABELS readme TIMEOUT 900 PROCESSORS 2 COST 1000
                     SKIP_RETURN_CODE 77 ENVIRONMENT "DS_README_BIN=${CMAKE_BINARY_DIR}/bin")
