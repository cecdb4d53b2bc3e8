# Finds ember's system dependencies and fails early, naming the Debian package to install
# (scripts/install_deps.sh installs them all).

function(ember_missing what package)
  message(FATAL_ERROR "${what} not found: install the Debian package '${package}' "
                      "(or run scripts/install_deps.sh, which installs everything ember needs)")
endfunction()

find_package(ZLIB QUIET)
if(NOT ZLIB_FOUND)
  ember_missing("zlib" "zlib1g-dev")
endif()

find_package(nlohmann_json 3 QUIET)
if(NOT nlohmann_json_FOUND)
  ember_missing("nlohmann-json" "nlohmann-json3-dev")
endif()

find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
  ember_missing("CLI11" "libcli11-dev")
endif()

# A training checkpoint ties its state to its model file by the file's SHA-256 (train/checkpoint.cpp,
# with OpenSSL's libcrypto).
if(EMBER_DEPS_ROOT AND NOT OPENSSL_ROOT_DIR)
  set(OPENSSL_ROOT_DIR ${EMBER_DEPS_ROOT}/usr)
endif()
find_package(OpenSSL QUIET COMPONENTS Crypto)
if(NOT OpenSSL_FOUND)
  ember_missing("OpenSSL's libcrypto" "libssl-dev")
endif()

find_path(EMBER_STB_INCLUDE_DIR stb/stb_image.h HINTS ${EMBER_DEPS_ROOT}/usr/include)
if(NOT EMBER_STB_INCLUDE_DIR)
  ember_missing("stb_image" "libstb-dev")
endif()

if(EMBER_BUILD_TESTS)
  find_package(Catch2 2 QUIET)
  if(NOT Catch2_FOUND)
    ember_missing("Catch2 v2" "catch2")
  endif()
endif()

# OpenBLAS: looked for by path rather than through its CMake package, so that a copy unpacked
# with `dpkg -x` (no alternatives links; see scripts/prepare_gpu_check.sh) is found the same way.
if(EMBER_BLAS STREQUAL "openblas")
  set(_openblas_hints ${EMBER_DEPS_ROOT}/usr)
  find_path(EMBER_OPENBLAS_INCLUDE_DIR cblas.h
            HINTS ${_openblas_hints}/include/x86_64-linux-gnu/openblas-pthread
                  ${_openblas_hints}/include/aarch64-linux-gnu/openblas-pthread
            PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/aarch64-linux-gnu/openblas-pthread
                  /usr/include/openblas /usr/include
            NO_CMAKE_SYSTEM_PATH)
  find_library(EMBER_OPENBLAS_LIBRARY NAMES openblas
               HINTS ${_openblas_hints}/lib/x86_64-linux-gnu/openblas-pthread
                     ${_openblas_hints}/lib/aarch64-linux-gnu/openblas-pthread
               PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/aarch64-linux-gnu/openblas-pthread)
  if(NOT EMBER_OPENBLAS_INCLUDE_DIR OR NOT EMBER_OPENBLAS_LIBRARY)
    message(FATAL_ERROR "OpenBLAS not found: install the Debian package 'libopenblas-dev' "
                        "(scripts/install_deps.sh), or configure with -DEMBER_BLAS=builtin for ember's own "
                        "(slow but correct) CPU GEMM")
  endif()
  add_library(ember_openblas INTERFACE)
  target_include_directories(ember_openblas INTERFACE ${EMBER_OPENBLAS_INCLUDE_DIR})
  target_link_libraries(ember_openblas INTERFACE ${EMBER_OPENBLAS_LIBRARY})
  message(STATUS "ember: OpenBLAS ${EMBER_OPENBLAS_LIBRARY}")
elseif(NOT EMBER_BLAS STREQUAL "builtin")
  message(FATAL_ERROR "EMBER_BLAS must be 'openblas' or 'builtin', got '${EMBER_BLAS}'")
endif()

find_package(Threads REQUIRED)
