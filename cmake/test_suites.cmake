# txl_add_test_suites(<target> [PREFIX p] [LABELS l...] [ENVIRONMENT e...]): one ctest test per
# GoogleTest suite of <target> (`<p><Suite>`, running `<target> --gtest_filter=<Suite>.*`), found
# when ctest starts, as gtest_discover_tests' PRE_TEST mode finds single tests. A test process
# starts LibTorch, about 0.7 s of CPU before its first line: one process per test case spent 540
# of the suite's 800 s on 2 cores (docs/building.md), one per suite spends about a fifth of that.
# The tests of one suite share a process, as they do when a test binary runs on its own. A suite
# whose tests all skip exits 77 (tests/support/test_main.cpp) and shows as skipped.
set(TXL_TEST_SUITES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/test_suites_script.cmake)

function(txl_add_test_suites target)
  cmake_parse_arguments(A "" "PREFIX" "LABELS;ENVIRONMENT" ${ARGN})
  set(base "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites")
  # What ctest includes: list the suites again when the binary (or this file) is newer than the
  # list, then read the list.
  string(CONCAT content
    "set(txl_binary [==[$<TARGET_FILE:${target}>]==])\n"
    "set(txl_tests [==[${base}_tests.cmake]==])\n"
    "if(NOT EXISTS \"\${txl_tests}\" OR NOT \"\${txl_tests}\" IS_NEWER_THAN \"\${txl_binary}\" OR\n"
    "   NOT \"\${txl_tests}\" IS_NEWER_THAN \"\${CMAKE_CURRENT_LIST_FILE}\")\n"
    "  set(txl_prefix [==[${A_PREFIX}]==])\n"
    "  set(txl_labels [==[${A_LABELS}]==])\n"
    "  set(txl_environment [==[${A_ENVIRONMENT}]==])\n"
    "  set(txl_workdir [==[${CMAKE_BINARY_DIR}]==])\n"
    "  include([==[${TXL_TEST_SUITES_SCRIPT}]==])\n"
    "endif()\n"
    "include(\"\${txl_tests}\")\n")
  file(GENERATE OUTPUT "${base}_include.cmake" CONTENT "${content}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${base}_include.cmake")
endfunction()
