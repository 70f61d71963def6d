# The last-error API (engine/core/status.h): messages that wrap the last
# error, the capacity, the trace, one message per thread.
ds_add_test(NAME test_status SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_status.c LABELS unit)
target_link_libraries(test_status PRIVATE Threads::Threads)
