# danqing_dra_dynamic_mig: dynamic MIG through DRA (issue 26): placement
# geometry and counters (mig_placements.h), the partitionable-device slices
# and the per-claim instance lifecycle (dynamic_mig.h), and its NVML side
# (nvml_mig_control.h). Included from the top-level CMakeLists.txt.
add_library(danqing_dra_dynamic_mig
  ${CMAKE_CURRENT_LIST_DIR}/mig_placements.cc
  ${CMAKE_CURRENT_LIST_DIR}/dynamic_mig.cc
  ${CMAKE_CURRENT_LIST_DIR}/nvml_mig_control.cc)
target_include_directories(danqing_dra_dynamic_mig PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(danqing_dra_dynamic_mig
  PUBLIC danqing_common nlohmann_json::nlohmann_json PRIVATE danqing_settings ${CMAKE_DL_LIBS})
# The CDI side: a created instance as a node device for claim_cdi.h.
add_library(danqing_dra_dynamic_mig_cdi ${CMAKE_CURRENT_LIST_DIR}/dynamic_mig_cdi.cc)
target_link_libraries(danqing_dra_dynamic_mig_cdi PUBLIC danqing_dra_dynamic_mig danqing_dra_node
  PRIVATE danqing_settings)
