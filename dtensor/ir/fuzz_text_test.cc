// Random mutations of valid IR text (seeded, a few hundred per file) must give a clean dt::Error
// (never a crash, never an internal error); a mutant that parses must round-trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtensor/core/error.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"

namespace dt::ir {
namespace {

// Applies one random edit: change, delete, duplicate or insert bytes, or swap two lines.
std::string mutate(const std::string& text, Generator& gen) {
  std::string s = text;
  static const char kAlphabet[] = "%{}()[],:=.-+e0123456789 \n\"#abcfix_";
  auto pick = [&](size_t n) { return size_t(gen.next_u64() % std::max<size_t>(n, 1)); };
  const int edits = 1 + int(pick(3));
  for (int e = 0; e < edits && !s.empty(); ++e) {
    size_t at = pick(s.size());
    switch (pick(6)) {
      case 0: s[at] = kAlphabet[pick(sizeof(kAlphabet) - 1)]; break;
      case 1: s.erase(at, 1 + pick(8)); break;
      case 2: s.insert(at, s.substr(pick(s.size()), 1 + pick(16))); break;
      case 3: s.insert(at, 1, kAlphabet[pick(sizeof(kAlphabet) - 1)]); break;
      case 4: s[at] = char(gen.next_u64() & 0xff); break;
      case 5: {
        size_t a = s.rfind('\n', at), b = s.find('\n', pick(s.size()));
        if (a != std::string::npos && b != std::string::npos && a < b) std::swap(s[a + 1], s[b - 1]);
        break;
      }
    }
  }
  return s;
}

void fuzz(const std::string& text, uint64_t seed, int rounds) {
  Generator gen(seed);
  int parsed = 0;
  for (int i = 0; i < rounds; ++i) {
    std::string m = mutate(text, gen);
    try {
      Graph g = parse(m, "fuzz.dt");
      ++parsed;
      std::string p = print(g);
      ASSERT_EQ(print(parse(p, "fuzz.dt")), p) << "mutant " << i << ":\n" << m;
    } catch (const InternalError& e) {
      FAIL() << "internal error on mutant " << i << ": " << e.what() << "\n" << m;
    } catch (const Error& e) {
      // A ParseError, or an inference error (ShapeError, DTypeError, ...) that kept its type: all
      // of them say where in the text the problem is.
      ASSERT_EQ(std::string(e.what()).rfind("fuzz.dt:", 0), 0u) << e.what();
      ASSERT_GT(e.line(), 0) << e.what();
    }
  }
  // Most mutants must fail (a test that never sees an error checks nothing).
  EXPECT_LT(parsed, rounds);
}

TEST(FuzzText, GoldenFiles) {
  uint64_t seed = 1;
  for (const auto& e : std::filesystem::directory_iterator(DTENSOR_IR_GOLDEN_DIR)) {
    if (e.path().extension() != ".dt") continue;
    std::ifstream in(e.path());
    std::ostringstream ss;
    ss << in.rdbuf();
    SCOPED_TRACE(e.path().string());
    fuzz(ss.str(), seed++, 300);
  }
}

TEST(FuzzText, ExampleGpt) { fuzz(print(build_gpt({.layers = 1})), 99, 300); }

}  // namespace
}  // namespace dt::ir
