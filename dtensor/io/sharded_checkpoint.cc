#include "dtensor/io/sharded_checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <utility>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/core/input_file.h"
#include "dtensor/core/signal_cleanup.h"
#include "dtensor/core/xxhash64.h"

namespace dt::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kManifest = "checkpoint.json";  // the commit marker
constexpr const char* kLock = ".dtensor-lock";
constexpr const char* kFormat = "dtensor sharded checkpoint";
constexpr int kVersion = 2;          // written unless some tensor lives on a sub-mesh
constexpr int kSubMeshVersion = 3;   // ... then this: a version 2 reader cannot assemble it
constexpr int kReadAttempts = 20;  // new generations committed while one reader reads

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

std::string rank_file_name(int rank) { return fmt::format("rank{}.safetensors", rank); }
std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

// 64 random bits, as 16 hex digits: names a save (its generation directory) and is recorded in
// the manifest and in every file of the save, so that files of two saves never pass as one set.
std::string new_save_id() {
  std::random_device rd;
  const uint64_t bits = (uint64_t(rd()) << 32 ^ uint64_t(rd())) ^
                        uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ULL ^
                        uint64_t(::getpid());
  return hex64(bits);
}

bool is_save_id(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The exclusive writer lock: flock on DIR/.dtensor-lock, held until destroyed, the holder's pid
// written in the file for the other writer's error message. The lock file itself stays (removing
// it would let a third writer lock a new file while the second still holds the old one).
class WriterLock {
 public:
  explicit WriterLock(const std::string& dir) {
    const std::string path = (fs::path(dir) / kLock).string();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) DT_THROW(IoError) << "cannot lock " << dir << " for writing: " << std::strerror(errno);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      char buf[32] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      ::close(fd_);
      const std::string pid = n > 0 ? std::string(buf, size_t(n)) : "";
      if (err == EWOULDBLOCK)
        DT_THROW(IoError) << "checkpoint " << dir << " is being written by another process"
                          << (pid.empty() ? "" : " (pid " + pid + ")") << ": one writer at a time";
      DT_THROW(IoError) << "cannot lock " << dir << " for writing: " << std::strerror(err);
    }
    const std::string me = std::to_string(::getpid());
    if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, me.data(), me.size(), 0);
  }
  ~WriterLock() { ::close(fd_); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes what earlier saves left in DIR: other generations (superseded, or never committed
// because their writer was killed) and hidden temporaries. Called under the writer lock, after
// this save's commit; best effort.
void remove_stale(const fs::path& dir, const std::string& keep) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool old_generation = name.rfind("gen-", 0) == 0 && name != keep && !e.is_symlink(ec);
    const bool temporary = name.rfind(".", 0) == 0 && name.find(".dtensor-tmp-") != std::string::npos;
    std::error_code rm;
    if (old_generation) fs::remove_all(e.path(), rm);
    else if (temporary) fs::remove(e.path(), rm);
  }
}

struct Manifest {
  std::string save_id, generation;
  DeviceMesh mesh;
  std::string plan;
  struct File {
    int rank = 0;
    uint64_t bytes = 0;
    std::string xxh64;
  };
  std::vector<File> files;  // in mesh.ranks() order
};

std::string manifest_path(const std::string& dir) { return (fs::path(dir) / kManifest).string(); }

Manifest read_manifest(const std::string& dir, const std::string& flag) {
  const std::string path = manifest_path(dir);
  if (!fs::exists(fs::symlink_status(path))) {
    if (fs::exists(fs::path(dir) / "rank0.safetensors"))
      DT_THROW(IoError) << flag << " " << dir << " holds rank files without " << kManifest
                        << " (an older dtensor's format, which cannot be verified): write the checkpoint again";
    DT_THROW(IoError) << flag << " " << dir << " is a directory but not a sharded checkpoint (no " << kManifest << ")";
  }
  const std::string text = read_input_file(path, "checkpoint manifest");
  Manifest m;
  try {
    const json j = json::parse(text);
    const int version = j.at("format").get<std::string>() == kFormat ? j.at("version").get<int>() : 0;
    if (version != kVersion && version != kSubMeshVersion)
      DT_THROW(IoError) << path << " is not a version " << kVersion << " or " << kSubMeshVersion << " " << kFormat
                        << " manifest";
    m.save_id = j.at("save_id").get<std::string>();
    m.generation = j.at("generation").get<std::string>();
    if (!is_save_id(m.save_id) || m.generation != "gen-" + m.save_id)
      DT_THROW(IoError) << path << " names a bad save id or generation";
    m.mesh = DeviceMesh::parse(j.at("mesh").get<std::string>());
    m.plan = j.at("plan").get<std::string>();
    if (j.at("hash").get<std::string>() != "xxh64") DT_THROW(IoError) << path << " uses an unknown hash";
    const json& files = j.at("files");
    if (!files.is_array() || files.size() != m.mesh.ranks().size())
      DT_THROW(IoError) << path << " lists " << files.size() << " files for mesh " << m.mesh.str();
    for (size_t i = 0; i < files.size(); ++i) {
      Manifest::File f{files[i].at("rank").get<int>(), files[i].at("bytes").get<uint64_t>(),
                       files[i].at("xxh64").get<std::string>()};
      if (f.rank != m.mesh.ranks()[i] || !is_save_id(f.xxh64))
        DT_THROW(IoError) << path << " lists a bad entry for rank " << m.mesh.ranks()[i];
      m.files.push_back(std::move(f));
    }
  } catch (const json::exception& e) {
    DT_THROW(IoError) << path << " is not a valid checkpoint manifest: " << e.what();
  } catch (const ValueError& e) {
    DT_THROW(IoError) << path << " is not a valid checkpoint manifest: " << e.what();
  }
  return m;
}

// Returns the save id DIR's manifest names now, or nullopt when it cannot be read.
std::optional<std::string> current_save_id(const std::string& dir) {
  try {
    return read_manifest(dir, "").save_id;
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Returns the non-negative integers of comma-separated `text`, or nullopt when it holds anything else.
std::optional<Shape> parse_ints(const std::string& text) {
  Shape out;
  for (const std::string& d : split_commas(text)) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(d, &used);
    } catch (const std::exception&) {
    }
    if (v < 0 || used != d.size()) return std::nullopt;
    out.push_back(v);
  }
  return out;
}

Shape parse_shape(const std::string& text, const std::string& file, const std::string& name) {
  const std::optional<Shape> shape = parse_ints(text);
  if (!shape) DT_THROW(IoError) << file << " records a bad shape for " << name << ": " << text;
  return *shape;
}

// Reads the generation `m` names: every file must have the listed size and hash and record the
// manifest's save id, its rank and the same mesh, placements and shapes as rank 0's file.
ShardedCheckpoint read_generation(const std::string& dir, const Manifest& m) {
  ShardedCheckpoint ckpt;
  ckpt.mesh = m.mesh;
  ckpt.plan = m.plan;
  std::map<std::string, std::string> meta0;
  for (const Manifest::File& entry : m.files) {
    const std::string path = (fs::path(dir) / m.generation / rank_file_name(entry.rank)).string();
    const std::string bytes = read_input_file(path, "checkpoint file");
    if (bytes.size() != entry.bytes)
      DT_THROW(IoError) << path << " has " << bytes.size() << " bytes but the checkpoint manifest lists " << entry.bytes
                        << ": the checkpoint is damaged";
    if (hex64(xxhash64(bytes)) != entry.xxh64)
      DT_THROW(IoError) << path << " does not match the hash in the checkpoint manifest: the checkpoint is damaged";
    const SafetensorsFile f = SafetensorsFile::from_bytes(bytes, path);
    std::map<std::string, std::string> meta = f.metadata();
    auto field = [&](const char* key) {
      auto it = meta.find(key);
      return it == meta.end() ? std::string() : it->second;
    };
    if (field("save_id") != m.save_id)
      DT_THROW(IoError) << path << " is from another save than " << manifest_path(dir) << ": the checkpoint is damaged";
    if (field("rank") != std::to_string(entry.rank) || field("mesh") != m.mesh.str())
      DT_THROW(IoError) << path << " records rank " << field("rank") << " of mesh " << field("mesh") << ", not rank "
                        << entry.rank << " of " << m.mesh.str();
    meta.erase("rank");
    if (meta0.empty()) meta0 = meta;
    else if (meta != meta0)
      DT_THROW(IoError) << path << " records other placements or shapes than rank " << m.files[0].rank << "'s file";
    ckpt.local.push_back(f.all());
  }
  for (const auto& [key, value] : meta0) {
    if (key.rfind("placements.", 0) != 0) continue;
    const std::string name = key.substr(11);
    ckpt.placements[name] = value;
    auto s = meta0.find("shape." + name);
    if (s == meta0.end()) DT_THROW(IoError) << "checkpoint " << dir << " records no shape for " << name;
    ckpt.shapes[name] = parse_shape(s->second, dir, name);
  }
  for (const auto& [key, value] : meta0) {
    if (key.rfind("submesh.", 0) != 0) continue;
    const std::string name = key.substr(8);
    const std::optional<Shape> at = parse_ints(value);  // "dim,index"
    if (!at || at->size() != 2 || (*at)[0] >= m.mesh.ndim() || (*at)[1] >= m.mesh.size((*at)[0]) ||
        !ckpt.placements.count(name))
      DT_THROW(IoError) << "checkpoint " << dir << " records a bad sub-mesh for " << name << ": " << value;
    ckpt.sub_meshes[name] = {(*at)[0], (*at)[1]};
  }
  for (size_t i = 0; i < ckpt.local.size(); ++i)
    for (const auto& [name, t] : ckpt.local[i])
      if (!ckpt.placements.count(name))
        DT_THROW(IoError) << "checkpoint " << dir << " records no placements for " << name;
  return ckpt;
}

}  // namespace

bool is_sharded_checkpoint_path(const std::string& path) {
  return fs::is_directory(path) || path.size() < 12 || path.substr(path.size() - 12) != ".safetensors";
}

void write_sharded_checkpoint(const std::string& dir, const ShardedCheckpoint& ckpt) {
  const std::vector<int>& ranks = ckpt.mesh.ranks();
  DT_CHECK(ckpt.local.size() == ranks.size()) << ckpt.local.size() << " ranks' shards for mesh " << ckpt.mesh.str();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) DT_THROW(IoError) << "cannot create directory " << dir << ": " << ec.message();
  const WriterLock lock(dir);

  const std::string id = new_save_id(), generation = "gen-" + id;
  const fs::path gen_dir = fs::path(dir) / generation;
  // Until the manifest commits the generation, SIGINT/TERM remove it (core/signal_cleanup.h: the
  // guard keeps a signal racing the commit from removing a committed generation, and a signal
  // during the commit waits for it) and an exception removes it here. Registered before it is
  // made, so that no moment leaves it unregistered.
  std::atomic<int> guard{0};
  std::vector<int> slots = {register_cleanup(gen_dir.string(), &guard)};
  bool committed = false;
  struct Unwind {
    std::vector<int>& slots;
    bool& committed;
    std::atomic<int>& guard;
    const fs::path& gen_dir;
    ~Unwind() {
      std::error_code ignore;
      if (!committed) fs::remove_all(gen_dir, ignore);
      for (int s : slots) unregister_cleanup(s);
      guard.store(committed ? 3 : 2);  // no commit in progress any more
      release_deferred_signal();       // a signal that came during the commit ends the process now
    }
  } unwind{slots, committed, guard, gen_dir};
  if (!fs::create_directory(gen_dir, ec))
    DT_THROW(IoError) << "cannot create directory " << gen_dir.string() << ": " << ec.message();

  std::map<std::string, std::string> meta = {
      {"format", kFormat}, {"mesh", ckpt.mesh.str()}, {"plan", ckpt.plan}, {"save_id", id}};
  for (const auto& [name, p] : ckpt.placements) {
    meta["placements." + name] = p;
    auto it = ckpt.shapes.find(name);
    DT_CHECK(it != ckpt.shapes.end()) << "no full shape for " << name;
    const Shape& s = it->second;
    meta["shape." + name] = fmt::format("{}", fmt::join(s.begin(), s.end(), ","));
  }
  for (const auto& [name, sub] : ckpt.sub_meshes) {
    DT_CHECK(ckpt.placements.count(name)) << "a sub-mesh but no placements for " << name;
    meta["submesh." + name] = fmt::format("{},{}", sub.dim, sub.index);
  }
  json files = json::array();
  StagedFiles staged;
  for (size_t i = 0; i < ranks.size(); ++i) {
    meta["rank"] = std::to_string(ranks[i]);
    const std::string bytes = safetensors_bytes(ckpt.local[i], meta);
    const std::string path = (gen_dir / rank_file_name(ranks[i])).string();
    slots.push_back(register_cleanup(path, &guard));
    staged.add(path, bytes);
    files.push_back({{"rank", ranks[i]}, {"bytes", bytes.size()}, {"xxh64", hex64(xxhash64(bytes))}});
  }
  staged.commit();

  const json manifest = {{"format", kFormat}, {"version", ckpt.sub_meshes.empty() ? kVersion : kSubMeshVersion},
                         {"save_id", id},
                         {"generation", generation}, {"mesh", ckpt.mesh.str()}, {"plan", ckpt.plan},
                         {"hash", "xxh64"}, {"files", files}};
  StagedFiles marker;
  marker.add(manifest_path(dir), manifest.dump(1) + "\n");
  if (!claim_for_commit(guard)) DT_THROW(IoError) << "the save of " << dir << " was interrupted";
  marker.commit();  // the commit: renaming the manifest into place
  committed = true;
  remove_stale(dir, generation);
}

ShardedCheckpoint read_sharded_checkpoint(const std::string& dir, const std::string& flag) {
  if (!fs::is_directory(dir)) DT_THROW(IoError) << flag << " " << dir << " is not a directory";
  for (int attempt = 1;; ++attempt) {
    const Manifest m = read_manifest(dir, flag);
    try {
      return read_generation(dir, m);
    } catch (const Error&) {
      // A writer may have committed a newer generation (and removed this one) while we read it:
      // read the new one. Otherwise the checkpoint itself is damaged.
      const std::optional<std::string> now = current_save_id(dir);
      if (attempt < kReadAttempts && now && *now != m.save_id) continue;
      throw;
    }
  }
}

}  // namespace dt::io
