# The op table (support/op_table.h) and the tests it feeds, included by tests/CMakeLists.txt after
# test_autograd and ops_tool exist: every op's samples for the gradcheck (test_autograd), the
# comparison with PyTorch (ops_tool), and every op on each device, written once
# (tests/core/test_op_devices.cpp) and run per device as PyTorch's instantiate_device_type_tests does:
# ops_cpu, and ops_cuda, skipped (77) where no CUDA device is usable and run on the software GPU
# in its build (label sim, so scripts/sim_test.sh runs it).
add_library(ember_op_table STATIC support/op_table.cpp support/op_table_elementwise.cpp support/op_table_reduce.cpp
                                  support/op_table_nn.cpp support/op_table_attention.cpp
                                  support/op_table_shape.cpp)
ember_target_defaults(ember_op_table)
target_include_directories(ember_op_table PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(ember_op_table PUBLIC ember::ember)
target_link_libraries(test_autograd PRIVATE ember_op_table)
target_link_libraries(ops_tool PRIVATE ember_op_table)

ember_device_test(test_op_devices ops core/test_op_devices.cpp)
target_link_libraries(test_op_devices PRIVATE ember_op_table)
# Autocast's policy, op by op over the table, on each device (tests/core/test_autocast.cpp).
ember_device_test(test_autocast autocast core/test_autocast.cpp)
target_link_libraries(test_autocast PRIVATE ember_op_table)

# An autocast key misspelt does not compile; spelt right, the same file does (compile/autocast_key.cpp).
foreach(key linear lienar)
  add_library(autocast_key_${key} OBJECT EXCLUDE_FROM_ALL compile/autocast_key.cpp)
  target_compile_definitions(autocast_key_${key} PRIVATE EMBER_KEY=${key})
  target_link_libraries(autocast_key_${key} PRIVATE ember::ember)
endforeach()
add_test(NAME autocast_key_spelt_right COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target autocast_key_linear)
add_test(NAME autocast_key_misspelt COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target autocast_key_lienar)
set_tests_properties(autocast_key_misspelt PROPERTIES PASS_REGULAR_EXPRESSION
  "lienar[^ ]* is not a member of [^ ]*ember::OpKey|no member named [^ ]*lienar[^ ]* in [^ ]*ember::OpKey")
# One build tool at a time in the build tree.
set_tests_properties(autocast_key_spelt_right autocast_key_misspelt PROPERTIES RESOURCE_LOCK build_tree)

# docs/ops.md lists exactly the table's ops, and its counts are the table's; and the check itself,
# on a page that lists an op the table has not, misses one it has, and miscounts.
add_test(NAME op_table_docs COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/check_op_docs.py
                                    $<TARGET_FILE:ops_tool> ${PROJECT_SOURCE_DIR}/docs/ops.md)
add_test(NAME op_table_docs_catches COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/check_op_docs.py
                                            $<TARGET_FILE:ops_tool> ${CMAKE_CURRENT_SOURCE_DIR}/support/op_docs_planted.md)
set_tests_properties(op_table_docs_catches PROPERTIES PASS_REGULAR_EXPRESSION
  "frobnicate is in .*op_docs_planted.md but not in the op table.*sigmoid is in the op table but not in .*op_docs_planted.md.*says 99 ops, the table has [0-9]+")

# Autocast's policy against PyTorch's, op by op (interop/autocast_torch.py): the result dtypes of
# every sample under bf16 autocast on the CPU, and the CUDA lists where the installed PyTorch's
# header holds them (its CUDA half is skipped, saying why, where the header predates them). Then
# the two header layouts whatever PyTorch is installed: PyTorch 1.x's, without lists (the CUDA
# half skipped, the test passing), and recent 2.x's, with them (every op's CUDA policy compared).
add_test(NAME autocast_torch COMMAND ${EMBER_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/interop/autocast_torch.py
                                     --tool $<TARGET_FILE:ops_tool>)
add_test(NAME autocast_torch_header_1x COMMAND ${EMBER_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/interop/autocast_torch.py
         --tool $<TARGET_FILE:ops_tool> --header ${CMAKE_CURRENT_SOURCE_DIR}/interop/autocast_mode_1x.h)
add_test(NAME autocast_torch_header_2x COMMAND ${EMBER_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/interop/autocast_torch.py
         --tool $<TARGET_FILE:ops_tool> --header ${CMAKE_CURRENT_SOURCE_DIR}/interop/autocast_mode_2x_lists.h)
set_tests_properties(autocast_torch autocast_torch_header_1x autocast_torch_header_2x PROPERTIES SKIP_RETURN_CODE 77)
set_tests_properties(autocast_torch_header_1x PROPERTIES PASS_REGULAR_EXPRESSION
  "CUDA: not compared: .*autocast_mode_1x.h predates the AT_FORALL_\\* lists .*: ok")
set_tests_properties(autocast_torch_header_2x PROPERTIES PASS_REGULAR_EXPRESSION
  "CUDA: [1-9][0-9]* ops' policies compared with the lists of .*autocast_mode_2x_lists.h: ok")

# bf16 on the CPU as without AVX512-BF16 (EMBER_NO_AVX512_BF16=1: products and convolutions in
# f32): every op in bf16 against the f32 op, rounded once.
add_test(NAME ops_cpu_no_avx512_bf16 COMMAND test_op_devices --device cpu "every op in bf16 and f16*")
set_tests_properties(ops_cpu_no_avx512_bf16 PROPERTIES ENVIRONMENT EMBER_NO_AVX512_BF16=1)
# Every op (and its bf16/f16 form) with the CPU kernels' plain loops instead of their AVX-512 forms
# (EMBER_NO_AVX512=1, Note [CPU dispatch]): the same results as with them.
add_test(NAME ops_cpu_no_avx512 COMMAND test_op_devices --device cpu)
set_tests_properties(ops_cpu_no_avx512 PROPERTIES ENVIRONMENT EMBER_NO_AVX512=1)
