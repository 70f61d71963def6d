# The dependency direction (DESIGN.md, "Layout"): the ground floor (engine/'s
# subfolders) includes nothing above it, offload/ nothing of zero/ or
# models/, models/ nothing of zero/ or offload/. A grep over the sources.
add_test(NAME test_layers
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_layers.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(test_layers PROPERTIES LABELS unit)
