// The kernel-path switch both GEMM choices use: the environment variable's values and errors, the
// CPU default, overrides and their scopes. A variable of the test's own keeps the real ones unset.
#include "dtensor/kernels/kernel_path.h"

#include <cstdlib>

#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

bool g_supported = true, g_prefer = true;
bool supported() { return g_supported; }
bool prefer() { return g_prefer; }
constexpr const char* kEnv = "DTENSOR_TEST_KERNEL_PATH";

KernelPathSwitch make_switch() { return KernelPathSwitch({kEnv, "slow", "quick", "AVX-9000", &supported, &prefer}); }

// Resets the test's knobs and variable around each case.
class KernelPath : public testing::Test {
 protected:
  void SetUp() override {
    unsetenv(kEnv);
    g_supported = g_prefer = true;
  }
  void TearDown() override { unsetenv(kEnv); }
};

TEST_F(KernelPath, UnsetChoosesByCpu) {
  EXPECT_TRUE(make_switch().fast());
  g_prefer = false;
  EXPECT_FALSE(make_switch().fast());
  g_prefer = true;
  g_supported = false;  // preferred but not runnable: portable
  EXPECT_FALSE(make_switch().fast());
}

TEST_F(KernelPath, VariableNamesThePath) {
  setenv(kEnv, "slow", 1);
  EXPECT_FALSE(make_switch().fast());
  setenv(kEnv, "quick", 1);
  g_prefer = false;
  EXPECT_TRUE(make_switch().fast());
}

TEST_F(KernelPath, BadValueOrMissingInstructionsIsAValueError) {
  setenv(kEnv, "fastest", 1);
  test::expect_error<ValueError>([] { make_switch().fast(); },
                                 {"DTENSOR_TEST_KERNEL_PATH must be quick or slow", "got 'fastest'"});
  setenv(kEnv, "quick", 1);
  g_supported = false;
  test::expect_error<ValueError>([] { make_switch().fast(); },
                                 {"DTENSOR_TEST_KERNEL_PATH=quick needs AVX-9000", "this CPU does not have"});
  setenv(kEnv, "slow", 1);  // the portable path needs nothing
  EXPECT_FALSE(make_switch().fast());
}

TEST_F(KernelPath, SetOverridesAndRefusesWhatTheCpuLacks) {
  KernelPathSwitch s = make_switch();
  s.set(false);
  EXPECT_FALSE(s.fast());
  s.set(true);
  EXPECT_TRUE(s.fast());
  g_supported = false;
  test::expect_error<ValueError>([&] { s.set(true); }, {"quick path of DTENSOR_TEST_KERNEL_PATH needs AVX-9000"});
  EXPECT_TRUE(s.fast());  // a refused override changes nothing
  s.set(false);
  EXPECT_FALSE(s.fast());
}

enum class TestPath { slow, quick };
KernelPathSwitch g_switch({kEnv, "slow", "quick", "AVX-9000", &supported, &prefer});
TestPath get_path() { return g_switch.fast() ? TestPath::quick : TestPath::slow; }
void set_path(TestPath p) { g_switch.set(p == TestPath::quick); }

TEST_F(KernelPath, ScopeRestoresThePreviousPath) {
  set_path(TestPath::slow);
  {
    ScopedKernelPath<TestPath, get_path, set_path> scoped(TestPath::quick);
    EXPECT_EQ(get_path(), TestPath::quick);
  }
  EXPECT_EQ(get_path(), TestPath::slow);
}

}  // namespace
}  // namespace dt
