# Dynamic MIG (issue 26): placements and counters, the slices, the instance
# lifecycle over an in-memory MigControl and over the fake NVML.
add_executable(dra_dynamic_mig_test ${CMAKE_CURRENT_LIST_DIR}/dynamic_mig_test.cc)
target_include_directories(dra_dynamic_mig_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(dra_dynamic_mig_test PRIVATE danqing_dra_dynamic_mig_cdi danqing_settings
                      GTest::gtest_main GTest::gmock Threads::Threads)
target_compile_definitions(dra_dynamic_mig_test PRIVATE
  DANQING_FAKE_NVML_LIB="${FAKE_NVML_LIB_DIR}/libnvidia-ml.so.1"
  DANQING_FAKE_NVML_PROFILE_DIR="${FAKE_NVML_PROFILE_DIR}")
add_dependencies(dra_dynamic_mig_test fake_nvml)
gtest_discover_tests(dra_dynamic_mig_test DISCOVERY_TIMEOUT 60 PROPERTIES ${DANQING_TEST_PROPS})
add_executable(dra_dynamic_mig_config_test ${CMAKE_CURRENT_LIST_DIR}/dynamic_mig_config_test.cc)
target_include_directories(dra_dynamic_mig_config_test PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(dra_dynamic_mig_config_test PRIVATE danqing_config danqing_settings GTest::gtest_main)
gtest_discover_tests(dra_dynamic_mig_config_test DISCOVERY_TIMEOUT 60 PROPERTIES ${DANQING_TEST_PROPS})
