# Included by the top-level CMakeLists.txt when TXL_FUZZ is on, before any target is made: every
# txl library is then built with AddressSanitizer (LeakSanitizer included), UBSan and libFuzzer's
# coverage, so the fuzz targets of tests/fuzz see into the code they call. tools/fuzz.sh
# configures such a build (build-fuzz/) and runs the targets.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TXL_FUZZ needs clang (libFuzzer): configure with "
                      "-DCMAKE_CXX_COMPILER=clang++-14, or run tools/fuzz.sh")
endif()
# UB stops the run (libFuzzer then keeps the input) instead of printing and going on.
set(TXL_FUZZ_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
    -g)
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer,address,undefined")
check_cxx_source_compiles([=[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }
]=] TXL_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(NOT TXL_HAVE_LIBFUZZER)
  message(FATAL_ERROR "clang cannot link -fsanitize=fuzzer,address,undefined: install "
                      "libclang-rt-14-dev (Debian), which holds libFuzzer and the sanitizer runtimes")
endif()
add_compile_options(${TXL_FUZZ_FLAGS} -fsanitize=fuzzer-no-link)
add_link_options(-fsanitize=address,undefined)
enable_testing()
