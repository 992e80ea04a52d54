# danqing_dra_publish: the DRA driver's API-server side (issue 25): this
# node's ResourceSlices from the inventory and health (slices.h), kept
# published by publisher.h; ResourceClaim allocations read by
# claim_reader.h (a ClaimSource; the parser and DeviceNameFor are
# danqing_dra_node's, shared with the node side). Included from the top-level CMakeLists.txt (the kubelet
# side of src/dra builds its own target).
add_library(danqing_dra_publish
  ${CMAKE_CURRENT_LIST_DIR}/slices.cc
  ${CMAKE_CURRENT_LIST_DIR}/publisher.cc
  ${CMAKE_CURRENT_LIST_DIR}/claim_reader.cc)
target_include_directories(danqing_dra_publish PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(danqing_dra_publish
  PUBLIC danqing_dra_node danqing_dra_dynamic_mig danqing_kube danqing_gpu danqing_health danqing_metrics_registry nlohmann_json::nlohmann_json
  PRIVATE spdlog::spdlog Threads::Threads)
