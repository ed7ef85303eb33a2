#include "ops/periodic_exporter.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "base/manifest.h"
#include "base/routing.h"
#include "base/test_dirs.h"
#include "gtest/gtest.h"

namespace ps::ops {
namespace {

// Writes DIR/export-<n>/ with a manifest of a full export (delta_index 0)
// or of delta `delta_index` of export-<base>.
void WriteExport(const std::string& dir, int n, int delta_index = 0,
                 int base = 0) {
  ExportManifest manifest;
  manifest.set_num_shards(1);
  manifest.set_routing_version(kRoutingVersion);
  manifest.mutable_model()->set_wide_table("m.wide");
  manifest.set_format_version(delta_index == 0 ? 2 : 3);
  if (delta_index > 0) {
    manifest.set_delta_index(delta_index);
    manifest.set_base(ExportName(base));
    manifest.set_predecessor(ExportName(n - 1));
  }
  std::filesystem::create_directories(dir + "/" + ExportName(n));
  ASSERT_TRUE(WriteManifest(dir + "/" + ExportName(n), manifest).ok());
}

bool Exists(const std::string& dir, int n) {
  return std::filesystem::exists(dir + "/" + ExportName(n));
}

TEST(PruneExportsTest, KeepsTheNewestBasesWithTheirDeltas) {
  const std::string dir = FreshTestDir("prune_exports");
  WriteExport(dir, 1);
  WriteExport(dir, 2, 1, 1);
  WriteExport(dir, 3);
  WriteExport(dir, 4, 1, 3);
  WriteExport(dir, 5, 2, 3);
  // Unfinished: one older than the newest finished export, one newer.
  std::filesystem::create_directories(dir + "/" + ExportName(6));
  WriteExport(dir, 7);
  WriteExport(dir, 8, 1, 7);
  std::filesystem::create_directories(dir + "/" + ExportName(9));
  // Not an export of this kind: never touched.
  std::filesystem::create_directories(dir + "/mine");
  std::ofstream(dir + "/mine/keep.txt") << "x";

  EXPECT_EQ(PruneExports(dir, 0).size(), 1u);  // the unfinished export-6
  EXPECT_FALSE(Exists(dir, 6));
  EXPECT_TRUE(Exists(dir, 1));
  EXPECT_TRUE(Exists(dir, 9));

  EXPECT_EQ(PruneExports(dir, 2).size(), 2u);
  for (int gone : {1, 2}) EXPECT_FALSE(Exists(dir, gone)) << gone;
  for (int kept : {3, 4, 5, 7, 8, 9}) EXPECT_TRUE(Exists(dir, kept)) << kept;

  EXPECT_EQ(PruneExports(dir, 1).size(), 3u);
  for (int gone : {3, 4, 5}) EXPECT_FALSE(Exists(dir, gone)) << gone;
  for (int kept : {7, 8, 9}) EXPECT_TRUE(Exists(dir, kept)) << kept;
  EXPECT_TRUE(std::filesystem::exists(dir + "/mine/keep.txt"));
}

}  // namespace
}  // namespace ps::ops
