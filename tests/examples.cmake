# examples/: programs and models written outside the library, against its
# public headers.
#
# examples/hello_train (the README's C program) as the README builds and runs
# it: installed, built with the README's pkg-config line, run as ./a.out,
# under mpirun -np 2 and under engine-run --np 2; one rank's losses against
# two's (tests/api/test_hello_example.sh).
add_test(NAME example_hello_train
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/api/test_hello_example.sh ${CMAKE_BINARY_DIR}
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(example_hello_train PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2)
#
# examples/conv_regressor (a 1-D conv regressor with its own modules and loss):
# its gradient check, built in the tree (the modules' values and gradients
# against a direct loop and central differences, and the module rules), and
# the whole example from the outside: install, build with pkg-config as the
# README says, train at ZeRO stages 0-3 on 1 and 2 ranks, compare the curves.
set(_conv_dir ${CMAKE_SOURCE_DIR}/examples/conv_regressor)
ds_add_test(NAME example_conv_gradcheck
            SOURCES ${_conv_dir}/gradcheck.c ${_conv_dir}/conv_model.c LABELS unit TIMEOUT 60)
add_test(NAME example_conv_regressor
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/api/test_conv_example.sh ${CMAKE_BINARY_DIR}
                 ${CMAKE_SOURCE_DIR} "${DS_MPIRUN_FLAGS_STR}")
set_tests_properties(example_conv_regressor PROPERTIES LABELS multirank TIMEOUT 300 PROCESSORS 2)
