# tools/bundle.sh (a build with the libraries and Open MPI runtime it needs,
# to run where Debian's packages are not installed): unpacked elsewhere and
# started from a bare environment, it runs on its own libraries and its own
# Open MPI (tests/unit/test_bundle.sh). Label bundle, not unit: in the
# sanitizer build the programs load the sanitizer runtimes, which a bundle
# leaves to the target like glibc. PROCESSORS 2: train_cls at 2 ranks.
add_test(NAME test_bundle
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_bundle.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/bundle_work)
set_tests_properties(test_bundle PROPERTIES LABELS bundle TIMEOUT 120 PROCESSORS 2)
