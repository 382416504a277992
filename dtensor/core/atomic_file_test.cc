#include "dtensor/core/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtensor/core/error.h"

namespace dt {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed at the end.
class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dtensor_atomic_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static void write(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  // Returns the names in the directory (temporaries included).
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir_;
};

TEST_F(AtomicFileTest, WritesAndReplaces) {
  write_file_atomically(path("a.txt"), "first");
  EXPECT_EQ(read(path("a.txt")), "first");
  write_file_atomically(path("a.txt"), "second, longer");
  EXPECT_EQ(read(path("a.txt")), "second, longer");
  EXPECT_EQ(names(), std::vector<std::string>{"a.txt"});
}

// A reader holding the old file keeps the old bytes: the file is replaced, never truncated.
TEST_F(AtomicFileTest, ReplacingDoesNotTouchTheOldInode) {
  write_file_atomically(path("w"), "old content");
  std::ifstream held(path("w"), std::ios::binary);
  write_file_atomically(path("w"), "new");
  std::ostringstream ss;
  ss << held.rdbuf();
  EXPECT_EQ(ss.str(), "old content");
  EXPECT_EQ(read(path("w")), "new");
}

// Issue 13: a set of files (a shard directory) where one cannot be written leaves every previous
// file intact and no temporary behind.
TEST_F(AtomicFileTest, FailedSetLeavesPreviousFilesIntact) {
  write(path("rank0"), "old0");
  write(path("rank1"), "old1");
  fs::create_directories(path("rank2"));  // cannot be replaced by a file
  try {
    StagedFiles files;
    files.add(path("rank0"), "new0");
    files.add(path("rank1"), "new1");
    files.add(path("rank2"), "new2");
    files.commit();
    ADD_FAILURE() << "rank2 was written";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write " + path("rank2") + ": it is a directory");
  }
  EXPECT_EQ(read(path("rank0")), "old0");
  EXPECT_EQ(read(path("rank1")), "old1");
  EXPECT_EQ(names(), (std::vector<std::string>{"rank0", "rank1", "rank2"}));
}

TEST_F(AtomicFileTest, UncommittedSetIsRemoved) {
  {
    StagedFiles files;
    files.add(path("x"), "data");
  }
  EXPECT_TRUE(names().empty());
}

TEST_F(AtomicFileTest, MissingDirectoryIsAnIoError) {
  EXPECT_THROW(write_file_atomically(path("no/such/dir/f"), "x"), IoError);
}

TEST_F(AtomicFileTest, KeepsPermissionsAndOwner) {
  write(path("target"), "old");
  ASSERT_EQ(::chmod(path("target").c_str(), 0640), 0);
  // Only a privileged writer can give a file away; as root the replaced file keeps its owner.
  const bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::chown(path("target").c_str(), 4321, 4322), 0);
  }
  write_file_atomically(path("target"), "new");
  EXPECT_EQ(read(path("target")), "new");
  struct stat st {};
  ASSERT_EQ(::stat(path("target").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  if (root) {
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 4322u);
  }
}

// A symlinked output is refused (target untouched) unless following is asked for; then the
// target is replaced and the link kept. A dangling link is refused either way.
TEST_F(AtomicFileTest, SymlinkedOutputIsRefusedUnlessFollowed) {
  write(path("target"), "old");
  fs::create_symlink(path("target"), path("link"));
  fs::create_symlink(path("nowhere"), path("dangling"));
  try {
    write_file_atomically(path("link"), "new");
    ADD_FAILURE() << "a symlinked output was written";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("is a symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read(path("target")), "old");
  EXPECT_THROW(write_file_atomically(path("dangling"), "new"), IoError);
  EXPECT_FALSE(fs::exists(path("nowhere")));
  set_follow_output_symlinks(true);
  write_file_atomically(path("link"), "new");
  EXPECT_THROW(write_file_atomically(path("dangling"), "new"), IoError);
  set_follow_output_symlinks(false);
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(read(path("target")), "new");
  EXPECT_EQ(names().size(), 3u);  // no temporaries left
  // A link to a device holds nothing to replace: written through.
  fs::create_symlink("/dev/null", path("null"));
  EXPECT_NO_THROW(write_file_atomically(path("null"), "discarded"));
}

// SIGTERM (and SIGINT) while a set is staged removes its temporaries before the process ends.
TEST_F(AtomicFileTest, SignalRemovesTemporaries) {
  for (int sig : {SIGTERM, SIGINT}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      StagedFiles files;
      files.add(path("a"), std::string(1 << 20, 'x'));
      files.add(path("b"), "y");
      ::raise(sig);
      ::_exit(0);  // not reached: the signal ends the process
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    EXPECT_TRUE(names().empty()) << names().size() << " files left, first " << names().front();
  }
}

TEST_F(AtomicFileTest, SameFileAndRefusal) {
  write(path("in"), "x");
  fs::create_hard_link(path("in"), path("hard"));
  EXPECT_TRUE(same_file(path("in"), path("hard")));
  EXPECT_TRUE(same_file(path("in"), dir_.string() + "/./in"));
  EXPECT_TRUE(same_file(path("new"), dir_.string() + "/../" + dir_.filename().string() + "/new"));
  EXPECT_FALSE(same_file(path("in"), path("new")));
  EXPECT_THROW(refuse_output_over_input(path("hard"), {{"weights", path("in")}}), IoError);
  EXPECT_NO_THROW(refuse_output_over_input(path("new"), {{"weights", path("in")}, {"plan", ""}}));
}

TEST_F(AtomicFileTest, NonRegularTargetIsWrittenDirectly) {
  EXPECT_NO_THROW(write_file_atomically("/dev/null", "discarded"));
}

}  // namespace
}  // namespace dt
