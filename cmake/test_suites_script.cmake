# Included by ctest (cmake/test_suites.cmake): lists the suites of ${txl_binary} and writes one
# add_test per suite into ${txl_tests}. A binary that cannot list its tests becomes one failing
# test named after it, with the reason, rather than no tests at all.
get_filename_component(txl_name "${txl_binary}" NAME)
execute_process(COMMAND "${txl_binary}" --gtest_list_tests WORKING_DIRECTORY "${txl_workdir}"
                TIMEOUT 300 RESULT_VARIABLE txl_rc OUTPUT_VARIABLE txl_out ERROR_VARIABLE txl_err)
set(txl_lines "")
if(NOT txl_rc EQUAL 0)
  string(REPLACE "\n" " " txl_err "${txl_err}")
  string(CONCAT txl_lines "add_test([==[${txl_prefix}${txl_name}.ListsItsTests]==] "
         "[==[${CMAKE_COMMAND}]==] -E echo [==[cannot list the tests of ${txl_binary}: "
         "exit ${txl_rc}: ${txl_err}]==])\n"
         "set_tests_properties([==[${txl_prefix}${txl_name}.ListsItsTests]==] PROPERTIES "
         "WILL_FAIL TRUE LABELS [==[${txl_labels}]==])\n")
else()
  string(REPLACE "\n" ";" txl_out "${txl_out}")
  foreach(txl_line IN LISTS txl_out)
    # A suite's line starts in column 0 and ends its name with a dot ("Suite." or, typed or
    # parameterised, "Prefix/Suite/0.  # TypeParam = ..."); its tests are indented.
    if(txl_line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
      set(txl_suite "${CMAKE_MATCH_1}")
      string(APPEND txl_lines
             "add_test([==[${txl_prefix}${txl_suite}]==] [==[${txl_binary}]==] "
             "[==[--gtest_filter=${txl_suite}.*]==])\n"
             "set_tests_properties([==[${txl_prefix}${txl_suite}]==] PROPERTIES "
             "WORKING_DIRECTORY [==[${txl_workdir}]==] SKIP_RETURN_CODE 77 "
             "LABELS [==[${txl_labels}]==] ENVIRONMENT [==[${txl_environment}]==])\n")
    endif()
  endforeach()
endif()
file(WRITE "${txl_tests}" "${txl_lines}")
