# LibTorch: find_package(Torch) for Debian's 1.13 or a LibTorch 2.x (PyPI's torch through
# CMAKE_PREFIX_PATH=torch.utils.cmake_prefix_path, the official zip, conda-forge's), and what txl
# needs to build against either: the C++ standard, the library and run paths of the LibTorch that
# was found, TXL_TORCH_RUNTIME_INCLUDE_DIRS (the headers of the CUDA and NCCL it runs with).

# A Python torch's LibTorch (CMAKE_PREFIX_PATH=torch.utils.cmake_prefix_path, <torch>/share/cmake):
# its package searches the system's library folders before <torch>/lib, so with another LibTorch
# installed (Debian's) it would take that one's libtorch and libc10. <torch> itself goes on the
# prefix path too, so that its lib/ is searched first.
foreach(prefix ${CMAKE_PREFIX_PATH})
  if(EXISTS "${prefix}/Torch/TorchConfig.cmake")
    get_filename_component(txl_torch_root "${prefix}/../.." ABSOLUTE)
    list(APPEND CMAKE_PREFIX_PATH "${txl_torch_root}")
  endif()
endforeach()
find_package(Torch REQUIRED)
# Every LibTorch library from the LibTorch whose package was found.
get_filename_component(txl_torch_prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
foreach(lib TORCH_LIBRARY c10_LIBRARY)
  get_filename_component(txl_lib "${${lib}}" REALPATH)
  string(FIND "${txl_lib}" "${txl_torch_prefix}/" txl_at)
  if(${lib} AND NOT txl_at EQUAL 0)
    message(FATAL_ERROR "LibTorch's package is in ${TORCH_INSTALL_PREFIX} but ${lib} is "
            "${${lib}}, another LibTorch's: put ${TORCH_INSTALL_PREFIX} in CMAKE_PREFIX_PATH and "
            "configure a fresh build folder")
  endif()
endforeach()
# LibTorch's own library search path (PyPI's torch: the folders of the nvidia-* wheels, relative
# to $ORIGIN) goes first in the run path of txl's programs, so that the linker and the loader take
# the CUDA, cuDNN and NCCL libraries LibTorch was built with, not those of an installed CUDA
# toolkit of another release that LibTorch's CMake package also links (its libcudart, libnvrtc).
# Their headers (<folder>/../include) are TXL_TORCH_RUNTIME_INCLUDE_DIRS, for the code that
# includes CUDA's or NCCL's headers (src/dist).
set(TXL_TORCH_RUNTIME_INCLUDE_DIRS "")
foreach(lib torch_cuda torch_cpu)
  set(txl_lib "${TORCH_INSTALL_PREFIX}/lib/lib${lib}.so")
  if(EXISTS "${txl_lib}" AND CMAKE_OBJDUMP)
    execute_process(COMMAND ${CMAKE_OBJDUMP} -p "${txl_lib}" OUTPUT_VARIABLE txl_headers ERROR_QUIET)
    if(txl_headers MATCHES "R(UN)?PATH +([^\n]+)")
      string(REPLACE ":" ";" txl_dirs "${CMAKE_MATCH_2}")
      foreach(dir ${txl_dirs})
        string(REPLACE "$ORIGIN" "${TORCH_INSTALL_PREFIX}/lib" dir "${dir}")
        get_filename_component(dir "${dir}" REALPATH)
        if(IS_DIRECTORY "${dir}" AND NOT dir IN_LIST CMAKE_BUILD_RPATH)
          list(APPEND CMAKE_BUILD_RPATH "${dir}")
          get_filename_component(include "${dir}/../include" ABSOLUTE)
          if(IS_DIRECTORY "${include}" AND NOT include IN_LIST TORCH_INCLUDE_DIRS)
            list(APPEND TXL_TORCH_RUNTIME_INCLUDE_DIRS "${include}")
          endif()
        endif()
      endforeach()
    endif()
  endif()
endforeach()
# LibTorch 2.x's headers need C++20 (its CMake package asks for it on the `torch` target): every
# txl target then compiles as C++20, so that the precompiled header and all code agree.
get_target_property(txl_torch_features torch INTERFACE_COMPILE_FEATURES)
if("cxx_std_20" IN_LIST txl_torch_features)
  set(CMAKE_CXX_STANDARD 20)
endif()
message(STATUS "txl: LibTorch ${Torch_VERSION}, C++${CMAKE_CXX_STANDARD}")
