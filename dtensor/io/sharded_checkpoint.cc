#include "dtensor/io/sharded_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"

namespace dt::io {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size() && !s.empty()) {
    const size_t end = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

std::string rank_file_path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / fmt::format("rank{}.safetensors", rank)).string();
}

}  // namespace

bool is_sharded_checkpoint_path(const std::string& path) {
  return std::filesystem::is_directory(path) || path.size() < 12 || path.substr(path.size() - 12) != ".safetensors";
}

void write_sharded_checkpoint(const std::string& dir, const ShardedCheckpoint& ckpt) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) DT_THROW(IoError) << "cannot create directory " << dir << ": " << ec.message();
  std::map<std::string, std::string> meta = {{"mesh", ckpt.mesh.str()}, {"plan", ckpt.plan}};
  for (const auto& [name, p] : ckpt.placements) {
    meta["placements." + name] = p;
    auto s = ckpt.shapes.find(name);
    if (s != ckpt.shapes.end()) meta["shape." + name] = fmt::format("{}", fmt::join(s->second.begin(), s->second.end(), ","));
  }
  StagedFiles files;  // all ranks' files appear together or not at all
  const std::vector<int>& ranks = ckpt.mesh.ranks();
  for (size_t i = 0; i < ranks.size(); ++i) {
    meta["rank"] = std::to_string(ranks[i]);
    files.add(rank_file_path(dir, ranks[i]), safetensors_bytes(ckpt.local.at(i), meta));
  }
  files.commit();
}

ShardedCheckpoint read_sharded_checkpoint(const std::string& dir, const std::string& flag) {
  const std::string first = rank_file_path(dir, 0);
  if (!std::filesystem::exists(first))
    DT_THROW(IoError) << flag << " " << dir << " is a directory without rank0.safetensors";
  const SafetensorsFile f0 = SafetensorsFile::open(first);
  auto mesh_it = f0.metadata().find("mesh");
  if (mesh_it == f0.metadata().end()) DT_THROW(IoError) << first << " records no mesh";
  ShardedCheckpoint ckpt;
  ckpt.mesh = DeviceMesh::parse(mesh_it->second);
  if (auto p = f0.metadata().find("plan"); p != f0.metadata().end()) ckpt.plan = p->second;
  for (int rank : ckpt.mesh.ranks()) {
    const std::string path = rank_file_path(dir, rank);
    if (!std::filesystem::exists(path))
      DT_THROW(IoError) << flag << " " << dir << " of mesh " << ckpt.mesh.str() << " has no " << path;
    ckpt.local.push_back(SafetensorsFile::open(path).all());
  }
  for (const std::string& name : f0.names()) {
    auto p = f0.metadata().find("placements." + name);
    if (p == f0.metadata().end()) DT_THROW(IoError) << first << " records no placements for " << name;
    ckpt.placements[name] = p->second;
    auto s = f0.metadata().find("shape." + name);
    if (s == f0.metadata().end()) continue;
    Shape shape;
    for (const std::string& d : split_commas(s->second)) {
      try {
        shape.push_back(std::stoll(d));
      } catch (const std::exception&) {
        DT_THROW(IoError) << first << " records a bad shape for " << name << ": " << s->second;
      }
    }
    ckpt.shapes[name] = shape;
  }
  return ckpt;
}

}  // namespace dt::io
