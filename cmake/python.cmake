# The Python interpreter that runs tools/plot_report.py, chosen once here and compiled into txl
# as the default (src/util/plot.cpp; $TXL_PYTHON overrides it at run time). -DTXL_PYTHON=path
# chooses it; left empty, the first of these that can `import matplotlib` is taken:
# /usr/bin/python3 (Debian's, beside python3-matplotlib), then what find_package(Python3) finds
# (which may be a pyenv or conda python without matplotlib); failing that the first that exists
# (plots are then skipped with a warning), failing that `python3` looked up on PATH at run time.
# The choice is cached: configure with -DTXL_PYTHON= to choose again.
set(TXL_PYTHON "" CACHE STRING "Python interpreter for the plot script (empty: detect one)")
if(NOT TXL_PYTHON)
  set(txl_python_candidates "")
  if(EXISTS /usr/bin/python3)
    list(APPEND txl_python_candidates /usr/bin/python3)
  endif()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    list(APPEND txl_python_candidates ${Python3_EXECUTABLE})
  endif()
  set(txl_python "")
  foreach(candidate ${txl_python_candidates})
    execute_process(COMMAND ${candidate} -c "import matplotlib" RESULT_VARIABLE txl_rc
                    OUTPUT_QUIET ERROR_QUIET TIMEOUT 120)
    if(txl_rc EQUAL 0)
      set(txl_python ${candidate})
      break()
    endif()
  endforeach()
  if(NOT txl_python AND txl_python_candidates)
    list(GET txl_python_candidates 0 txl_python)
    message(WARNING "txl: no Python with matplotlib among ${txl_python_candidates}; plots will "
                    "be skipped (install python3-matplotlib, or configure with -DTXL_PYTHON=...)")
  elseif(NOT txl_python)
    set(txl_python python3)
    message(WARNING "txl: no Python found; plots will look for python3 on PATH at run time")
  endif()
  set(TXL_PYTHON ${txl_python} CACHE STRING
      "Python interpreter for the plot script (empty: detect one)" FORCE)
endif()
message(STATUS "txl: plot interpreter ${TXL_PYTHON}")
