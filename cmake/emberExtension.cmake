# ember_add_extension(<target> SOURCES <files>...): adds a project's own ember code to <target> —
# layers, ops, and their CUDA kernels in .cu files — compiled as ember's own: C++20; the .cu files
# with nvcc for ember's architectures where ember has CUDA, by the host compiler for the software
# GPU where ember was built for it (-DEMBER_CUDA=SIM), and left out where ember has no CUDA (the
# CPU kernels then run everywhere: an op's CUDA branch is never instantiated without CUDA, Note
# [device dispatch]). Links ember::ember. Part of ember's installed CMake package.
function(ember_add_extension target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "SOURCES")
  set(cpu_sources "")
  set(cuda_sources "")
  foreach(source ${ARG_SOURCES})
    if(source MATCHES "\\.cu$")
      list(APPEND cuda_sources ${source})
    else()
      list(APPEND cpu_sources ${source})
    endif()
  endforeach()
  target_sources(${target} PRIVATE ${cpu_sources})
  if(EMBER_WITH_CUDA AND cuda_sources)
    if(EMBER_SIM)
      if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
        message(FATAL_ERROR "ember_add_extension: this ember runs CUDA on its software GPU, whose kernels need clang "
                            "(configure with CXX=clang++)")
      endif()
      # (The software GPU's linker script comes with ember::ember_sim's link options.)
      set_source_files_properties(${cuda_sources} PROPERTIES LANGUAGE CXX
                                  COMPILE_OPTIONS "-xc++;-include;${EMBER_SIM_SHIM}")
    else()
      set_source_files_properties(${cuda_sources} PROPERTIES LANGUAGE CUDA)
      # -std=c++20 by hand: CMake 3.25 cannot ask nvcc for C++20 through CUDA_STANDARD.
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --expt-relaxed-constexpr>)
    endif()
    target_sources(${target} PRIVATE ${cuda_sources})
  endif()
  target_compile_features(${target} PRIVATE cxx_std_20)
  target_link_libraries(${target} PRIVATE ember::ember)
endfunction()
