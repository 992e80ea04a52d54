// danqing.draDynamicMig / draDynamicMigDestroyOrphans (issue 26): parsed,
// validated with errors that name the field, and checked against the mode.
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"

namespace danqing::config {
namespace {

TEST(DynamicMigSettings, ParsedFromTheFile) {
  auto c = ParseConfig(
      "version: v1\ndanqing:\n  mode: dra\n  nodeName: n1\n  draDynamicMig: [\"0\", \"GPU-abc\", "
      "\"0\"]\n"
      "  draDynamicMigDestroyOrphans: true\n",
      "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->danqing.dra_dynamic_mig, (std::vector<std::string>{"0", "GPU-abc"}));
  EXPECT_TRUE(c->danqing.dra_dynamic_mig_destroy_orphans);
  EXPECT_TRUE(Validate(*c).ok());
  auto defaults = ParseConfig("version: v1\n", "test.yaml");
  ASSERT_TRUE(defaults.ok());
  EXPECT_TRUE(defaults->danqing.dra_dynamic_mig.empty());
  EXPECT_FALSE(defaults->danqing.dra_dynamic_mig_destroy_orphans);
}

TEST(DynamicMigSettings, BadValuesNameTheField) {
  auto bad =
      ParseConfig("version: v1\ndanqing:\n  draDynamicMig: [\"0\", \"mig-1\"]\n", "test.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("draDynamicMig"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("mig-1"), std::string::npos) << bad.status().message();
  auto wrong_type =
      ParseConfig("version: v1\ndanqing:\n  draDynamicMigDestroyOrphans: maybe\n", "test.yaml");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("draDynamicMigDestroyOrphans"), std::string::npos)
      << wrong_type.status().message();
  // Dynamic MIG is a DRA feature.
  auto plugin = ParseConfig("version: v1\ndanqing:\n  draDynamicMig: [all]\n", "test.yaml");
  ASSERT_TRUE(plugin.ok()) << plugin.status().message();
  const Status s = Validate(*plugin);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("danqing.draDynamicMig"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("dra or split"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace danqing::config
