#include "dtensor/core/input_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dtensor/core/error.h"
#include "tests/support/error_text.h"

namespace dt {
namespace {

namespace fs = std::filesystem;

std::string io_error(const std::string& path) {
  return test::error_text<IoError>([&] { read_input_file(path, "IR file"); });
}

TEST(InputFile, ReadsARegularFile) {
  fs::path p = fs::temp_directory_path() / ("dtensor_input_" + std::to_string(getpid()));
  std::ofstream(p) << "hello";
  EXPECT_EQ(read_input_file(p.string(), "IR file"), "hello");
  fs::remove(p);
}

// Issue 13: a FIFO as the model hung forever; it is refused before any read.
TEST(InputFile, RefusesNonRegularFiles) {
  fs::path fifo = fs::temp_directory_path() / ("dtensor_input_fifo_" + std::to_string(getpid()));
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(io_error(fifo.string()), "IR file " + fifo.string() + " is not a regular file (a fifo)");
  fs::remove(fifo);
  EXPECT_EQ(io_error("/dev/null"), "IR file /dev/null is not a regular file (a character device)");
  EXPECT_EQ(io_error("/"), "IR file / is not a regular file (a directory)");
  EXPECT_EQ(io_error("/nonexistent/x.dt"), "cannot open IR file /nonexistent/x.dt: No such file or directory");
}

TEST(InputFile, ReadPastTheEndIsAnIoError) {
  fs::path p = fs::temp_directory_path() / ("dtensor_input_short_" + std::to_string(getpid()));
  std::ofstream(p) << "abc";
  InputFile f(p.string(), "weights");
  char buf[8];
  EXPECT_THROW(f.read_exactly(buf, 8, 0), IoError);
  fs::remove(p);
}

}  // namespace
}  // namespace dt
