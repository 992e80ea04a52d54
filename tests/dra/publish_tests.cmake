# DRA, API-server side: ResourceSlices from the inventory (slice_test),
# their publication (publish_test), claim allocations (claim_reader_test),
# against the API server emulator and the fake NVML.
add_executable(dra_publish_test
  ${CMAKE_CURRENT_LIST_DIR}/slice_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/publish_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/claim_reader_test.cc)
target_include_directories(dra_publish_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(dra_publish_test PRIVATE danqing_dra_publish danqing_apiserver_emulator
                      GTest::gtest_main GTest::gmock)
target_compile_definitions(dra_publish_test PRIVATE
  DANQING_FAKE_NVML_LIB="${FAKE_NVML_LIB_DIR}/libnvidia-ml.so.1"
  DANQING_FAKE_NVML_PROFILE_DIR="${FAKE_NVML_PROFILE_DIR}")
add_dependencies(dra_publish_test fake_nvml)
gtest_discover_tests(dra_publish_test DISCOVERY_TIMEOUT 60 PROPERTIES ${DANQING_TEST_PROPS})
