# Sanitizer and fuzzing builds (scripts/sanitize.sh, scripts/fuzz.sh).
#
#   TESSERA_SANITIZE=address,undefined   ASan + UBSan (any subset of address, undefined, leak)
#   TESSERA_SANITIZE=thread              TSan (cannot be combined with address)
#   TESSERA_FUZZ=ON                      libFuzzer harnesses under tests/fuzz/ (clang only); every target is built
#                                        with coverage instrumentation, so that code in the CPU provider guides
#                                        the fuzzer as much as code in the core.
#
# The flags are added to every target of the project, plugins and test plugins included: a provider loaded into an
# instrumented process must be instrumented too, or memory it touches on the core's behalf goes unchecked.  CUDA
# sources are left alone; the scripts configure these builds with TESSERA_WITH_CUDA=OFF.

set(TESSERA_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined or thread (empty: none)")
option(TESSERA_FUZZ "Build the libFuzzer harnesses (tests/fuzz; needs clang)" OFF)

# Shared libraries are normally linked with --no-undefined (a missing symbol is a link error, not a load error).
# clang links the sanitizer runtimes into executables only, so an instrumented shared library has undefined
# __asan_*/__ubsan_*/__sanitizer_cov_* symbols that the executable provides at load time; there the check is off.
set(TESSERA_LINK_NO_UNDEFINED -Wl,--no-undefined)

if(TESSERA_SANITIZE)
  string(REPLACE "," ";" _sanitizers "${TESSERA_SANITIZE}")
  foreach(s IN LISTS _sanitizers)
    if(NOT s MATCHES "^(address|undefined|leak|thread)$")
      message(FATAL_ERROR "TESSERA_SANITIZE: unknown sanitizer '${s}' (address, undefined, leak, thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _sanitizers AND ("address" IN_LIST _sanitizers OR "leak" IN_LIST _sanitizers))
    message(FATAL_ERROR "TESSERA_SANITIZE: thread cannot be combined with address or leak")
  endif()
  # Frame pointers give whole stack traces in reports; -g gives file and line.
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${TESSERA_SANITIZE};-fno-omit-frame-pointer;-g>")
  add_link_options(-fsanitize=${TESSERA_SANITIZE})
  if("undefined" IN_LIST _sanitizers)
    # A UBSan report aborts the process, so that it fails the test instead of scrolling by.
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>)
  endif()
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(TESSERA_LINK_NO_UNDEFINED "")
  endif()
  message(STATUS "Tessera: sanitizers ${TESSERA_SANITIZE}")
endif()

if(TESSERA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang" OR NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TESSERA_FUZZ needs clang (libFuzzer): configure with CC=clang CXX=clang++")
  endif()
  if(NOT TESSERA_SANITIZE)
    message(WARNING "TESSERA_FUZZ without TESSERA_SANITIZE finds only crashes; scripts/fuzz.sh uses address,undefined")
  endif()
  # Coverage instrumentation everywhere; only the harnesses link libFuzzer itself (-fsanitize=fuzzer).
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>)
  add_link_options(-fsanitize=fuzzer-no-link)
  set(TESSERA_LINK_NO_UNDEFINED "")
endif()
