// A pipeline's sharded checkpoint: tensors on one stage's sub-mesh (only its ranks' files hold
// them) read back with their sub-mesh, the manifest at format version 3; a sub-mesh outside the
// mesh is refused by the reader with one line naming the tensor.
#include "dtensor/io/sharded_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtensor/core/error.h"

namespace dt::io {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("dtensor_ckpt_test_" + std::to_string(getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

// Mesh 2x2 cut on dim 0: "a" on stage 0 (ranks 0, 1, sharded on dim 0), "b" on stage 1 (ranks 2,
// 3, replicated), "c" on the whole mesh.
ShardedCheckpoint two_stages() {
  ShardedCheckpoint c{DeviceMesh::parse("2x2"), "pp.json", std::vector<TensorMap>(4), {}, {}, {}};
  for (int r = 0; r < 2; ++r) c.local[size_t(r)]["a"] = Tensor::full({1, 3}, double(r));
  for (int r = 2; r < 4; ++r) c.local[size_t(r)]["b"] = Tensor::full({2}, 5.0);
  for (int r = 0; r < 4; ++r) c.local[size_t(r)]["c"] = Tensor::full({1}, 1.0);
  c.placements = {{"a", "S(0)"}, {"b", "R"}, {"c", "R,R"}};
  c.shapes = {{"a", {2, 3}}, {"b", {2}}, {"c", {1}}};
  c.sub_meshes = {{"a", {0, 0}}, {"b", {0, 1}}};
  return c;
}

std::string manifest(const fs::path& dir) {
  std::ifstream in(dir / "checkpoint.json");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ShardedCheckpoint, PipelineStagesRoundTripWithTheirSubMeshes) {
  TempDir t;
  write_sharded_checkpoint(t.path.string(), two_stages());
  EXPECT_NE(manifest(t.path).find("\"version\": 3"), std::string::npos) << manifest(t.path);
  const ShardedCheckpoint back = read_sharded_checkpoint(t.path.string(), "--weights");
  EXPECT_EQ(back.sub_meshes, two_stages().sub_meshes);
  EXPECT_EQ(back.placements, two_stages().placements);
  ASSERT_EQ(back.local.size(), 4u);
  EXPECT_TRUE(back.local[0].count("a") && !back.local[0].count("b"));
  EXPECT_TRUE(back.local[3].count("b") && !back.local[3].count("a"));
  // Without sub-meshes the manifest stays at version 2 (what older readers take).
  ShardedCheckpoint plain = two_stages();
  plain.sub_meshes.clear();
  write_sharded_checkpoint(t.path.string(), plain);
  EXPECT_NE(manifest(t.path).find("\"version\": 2"), std::string::npos) << manifest(t.path);
  EXPECT_TRUE(read_sharded_checkpoint(t.path.string(), "--weights").sub_meshes.empty());
}

TEST(ShardedCheckpoint, RefusesASubMeshOutsideTheMesh) {
  for (const SubMesh bad : {SubMesh{2, 0}, SubMesh{0, 2}}) {
    TempDir t;
    ShardedCheckpoint c = two_stages();
    c.sub_meshes["b"] = bad;
    write_sharded_checkpoint(t.path.string(), c);
    try {
      read_sharded_checkpoint(t.path.string(), "--weights");
      ADD_FAILURE() << "no error for sub-mesh " << bad.dim << "," << bad.index;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("records a bad sub-mesh for b: " + std::to_string(bad.dim) + "," +
                                           std::to_string(bad.index)),
                std::string::npos)
          << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dt::io
