# The package test: cmake --install of this build into a prefix inside the build tree, then the
# project in tests/consumer/ configured against it (find_package(qkv), CMAKE_PREFIX_PATH=prefix)
# with this build's compiler, build type and sanitizer flags, built, and run. Fails on the first
# step that fails, printing its output.
#   cmake -DQKV_BUILD_DIR=... -DQKV_WORK_DIR=... -DQKV_CONSUMER_SOURCE=... -DQKV_GENERATOR=...
#         -DQKV_CXX_COMPILER=... -DQKV_BUILD_TYPE=... -DQKV_CXX_FLAGS=... -DQKV_WERROR=ON|OFF
#         -P consumer_test.cmake
foreach(var QKV_BUILD_DIR QKV_WORK_DIR QKV_CONSUMER_SOURCE QKV_GENERATOR QKV_CXX_COMPILER QKV_BUILD_TYPE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "consumer_test.cmake: ${var} is not set")
  endif()
endforeach()

set(prefix ${QKV_WORK_DIR}/prefix)
set(consumer_build ${QKV_WORK_DIR}/build)
# Start clean, so that nothing from an earlier run (a stale install or cache) can make it pass.
file(REMOVE_RECURSE ${QKV_WORK_DIR})

function(step what)
  message(STATUS "consumer_test: ${what}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer_test: ${what} failed (${rc}):\n${out}")
  endif()
  message("${out}")
endfunction()

step("install" ${CMAKE_COMMAND} --install ${QKV_BUILD_DIR} --prefix ${prefix})
foreach(file include/qkv/kernels/attention.h bin/qkv)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "consumer_test: the install has no ${file}")
  endif()
endforeach()
file(GLOB_RECURSE private_headers ${prefix}/include/*-inl.h ${prefix}/include/*/attention_problem.h)
if(private_headers)
  message(FATAL_ERROR "consumer_test: private headers were installed: ${private_headers}")
endif()

step("configure the consumer"
     ${CMAKE_COMMAND} -S ${QKV_CONSUMER_SOURCE} -B ${consumer_build} -G ${QKV_GENERATOR}
     -DCMAKE_CXX_COMPILER=${QKV_CXX_COMPILER}
     -DCMAKE_BUILD_TYPE=${QKV_BUILD_TYPE}
     "-DCMAKE_CXX_FLAGS=${QKV_CXX_FLAGS}"
     -DCMAKE_COMPILE_WARNING_AS_ERROR=${QKV_WERROR}
     -DCMAKE_PREFIX_PATH=${prefix}
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
     -DQKV_EXPECTED_PREFIX=${prefix})
step("build the consumer" ${CMAKE_COMMAND} --build ${consumer_build})
step("run the consumer" ${consumer_build}/qkv_consumer)
