#include "tools/rank_files.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::tools {
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

}  // namespace

std::string rank_file_path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / fmt::format("rank{}.safetensors", rank)).string();
}

bool is_rank_files_path(const std::string& path) {
  return std::filesystem::is_directory(path) || path.size() < 12 || path.substr(path.size() - 12) != ".safetensors";
}

void write_rank_files(const std::string& dir, const RankFiles& rf) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) DT_THROW(IoError) << "cannot create directory " << dir << ": " << ec.message();
  std::map<std::string, std::string> meta = {{"mesh", rf.mesh.str()}, {"plan", rf.plan}};
  for (const auto& [name, p] : rf.placements) {
    meta["placements." + name] = p;
    const Shape& s = rf.shapes.at(name);
    meta["shape." + name] = fmt::format("{}", fmt::join(s.begin(), s.end(), ","));
  }
  StagedFiles files;  // all ranks' files appear together or not at all
  const std::vector<int>& ranks = rf.mesh.ranks();
  for (size_t i = 0; i < ranks.size(); ++i) {
    meta["rank"] = std::to_string(ranks[i]);
    const auto& mine = rf.local.at(i);
    files.add(rank_file_path(dir, ranks[i]), io::safetensors_bytes(io::TensorMap(mine.begin(), mine.end()), meta));
  }
  files.commit();
}

std::map<std::string, Tensor> read_rank_files(const std::string& dir, const std::string& flag) {
  const std::string first = rank_file_path(dir, 0);
  if (!std::filesystem::exists(first))
    DT_THROW(IoError) << flag << " " << dir << " is a directory without rank0.safetensors";
  const io::SafetensorsFile f0 = io::SafetensorsFile::open(first);
  auto mesh_it = f0.metadata().find("mesh");
  if (mesh_it == f0.metadata().end()) DT_THROW(IoError) << first << " records no mesh";
  const DeviceMesh mesh = DeviceMesh::parse(mesh_it->second);
  std::vector<io::SafetensorsFile> files;
  for (int rank : mesh.ranks()) {
    const std::string path = rank_file_path(dir, rank);
    if (!std::filesystem::exists(path)) DT_THROW(IoError) << flag << " " << dir << " of mesh " << mesh.str() << " has no " << path;
    files.push_back(io::SafetensorsFile::open(path));
  }
  std::map<std::string, Tensor> full;
  for (const std::string& name : f0.names()) {
    auto p = f0.metadata().find("placements." + name);
    if (p == f0.metadata().end()) DT_THROW(IoError) << first << " records no placements for " << name;
    std::vector<Tensor> locals;
    for (const io::SafetensorsFile& f : files) locals.push_back(f.get(name));
    auto s = f0.metadata().find("shape." + name);
    if (s == f0.metadata().end()) DT_THROW(IoError) << first << " records no shape for " << name;
    Shape shape;
    for (const std::string& d : split_commas(s->second)) {
      try {
        shape.push_back(std::stoll(d));
      } catch (const std::exception&) {
        DT_THROW(IoError) << first << " records a bad shape for " << name << ": " << s->second;
      }
    }
    full[name] = sharding::assemble_tensor(locals, mesh, parse_placements(p->second), shape);
  }
  return full;
}

}  // namespace dt::tools
