#include <algorithm>
#include <cmath>
#include <cstring>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/kernels/activation_fma.h"
#include "dtensor/kernels/fast_math.h"
#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using namespace test;

// silu and tanh gelu of one f32 value as the ops compute it on the current activation path: the
// scalar kernel (portable) or activation_fma.
float silu_as_op(float x) {
  apply_activation(Activation::silu, &x, 1);
  return x;
}
float gelu_tanh_as_op(float x) {
  apply_activation(Activation::gelu_tanh, &x, 1);
  return x;
}

// Returns the activation paths this CPU can run.
std::vector<ActivationPath> activation_paths() {
  if (cpu_isa() >= BlasIsa::avx2) return {ActivationPath::portable, ActivationPath::fma};
  return {ActivationPath::portable};
}

// Returns |x| (log's inputs).
Tensor abs_of(const Tensor& x) { return maximum(x, neg(x)); }

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double low, high;  // input range where the op is defined
};

std::vector<UnaryCase> unary_cases() {
  const double pi = M_PI;
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, -3, 3},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.1, 5},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0, 5},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); }, 0.1, 5},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v < 0 ? 0 : v; }, -3, 3},
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, -4, 4},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); },
       [pi](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / pi) * (v + 0.044715 * v * v * v))); }, -4, 4},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double v) { return v / (1 + std::exp(-v)); }, -6, 6},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); }, -6, 6},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -3, 3},
      {"pow", [](const Tensor& x) { return pow(x, 2.5); }, [](double v) { return std::pow(v, 2.5); }, 0, 3},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double v) { return std::erf(v); }, -3, 3},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }, -4, 4},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double v) { return std::cos(v); }, -4, 4},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); }, -3, 3},
      {"clamp", [](const Tensor& x) { return clamp(x, -1, 0.5); }, [](double v) { return std::clamp(v, -1.0, 0.5); }, -3, 3},
      {"add_scalar", [](const Tensor& x) { return add(x, 1.5); }, [](double v) { return v + 1.5; }, -3, 3},
      {"mul_scalar", [](const Tensor& x) { return mul(x, -0.5); }, [](double v) { return v * -0.5; }, -3, 3},
  };
}

// Returns x in several layouts holding the same logical values: contiguous, transposed view,
// strided slice, and an expanded (stride 0) view.
std::vector<std::pair<std::string, Tensor>> layouts(DType dtype, double low, double high) {
  Tensor base = uniform({5, 7}, dtype, 11, low, high);
  Tensor wide = uniform({7, 10}, dtype, 12, low, high);
  Tensor row = uniform({1, 7}, dtype, 13, low, high);
  return {
      {"contiguous", base},
      {"transposed", uniform({7, 5}, dtype, 14, low, high).transpose(0, 1)},
      {"sliced", wide.slice(1, 1, 10, 2)},
      {"expanded", row.expand({5, 7})},
      {"empty", Tensor::empty({0, 3}, dtype)},
      {"scalar", Tensor::full({}, (low + high) / 2, dtype)},
  };
}

TEST(OpsUnary, MatchesReferenceForFloatDtypesAndLayouts) {
  for (const UnaryCase& c : unary_cases()) {
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      for (auto& [layout, x] : layouts(dtype, c.low, c.high)) {
        Tensor y = c.op(x);
        const std::string what = std::string(c.name) + " " + std::string(dtype_name(dtype)) + " " + layout;
        EXPECT_EQ(y.shape(), x.shape()) << what;
        EXPECT_EQ(y.dtype(), dtype) << what;
        EXPECT_TRUE(y.is_contiguous()) << what;
        std::vector<double> want = x.to_doubles();
        for (double& v : want) v = c.ref(v);
        // 16-bit results are one rounding of the f32 result: allow one ulp of the output type.
        const double atol = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-6 : 1e-4;
        expect_values(y, want, rtol_for(dtype) * 2, atol, what);
      }
    }
  }
}

TEST(OpsUnary, F32KernelsGiveTheSameBitsInEveryLayoutAndDtype) {
  // The vectorised contiguous rows, the scalar strided rows and a plain call of the fast_math.h
  // kernel agree bitwise (no dependence on vector width or row start), and bf16 is the f32 result
  // rounded once. silu and tanh gelu: on either activation path, the op on one value.
  for (ActivationPath path : activation_paths()) {
  const ScopedActivationPath scoped(path);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"exp", [](const Tensor& x) { return exp(x); }},      {"log", [](const Tensor& x) { return log(abs_of(x)); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},    {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }},    {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }}};
  const std::vector<float (*)(float)> kernels = {kernel::exp_f32,     kernel::log_f32, kernel::tanh_f32,
                                                 kernel::sigmoid_f32, silu_as_op,      kernel::gelu_f32,
                                                 gelu_tanh_as_op};
  Tensor x = uniform({37, 41}, DType::f32, 3, -12, 12);  // 41: rows not a multiple of the width
  for (size_t k = 0; k < ops.size(); ++k) {
    const auto& [name, op] = ops[k];
    const Tensor xin = std::string(name) == "log" ? abs_of(x) : x;
    std::vector<float> in = xin.to_vector<float>();
    std::vector<float> contiguous = op(x).to_vector<float>();
    std::vector<float> strided = op(x.transpose(0, 1).contiguous().transpose(0, 1)).to_vector<float>();
    std::vector<double> bf = op(x.to(DType::bf16)).to_doubles();
    std::vector<float> in_bf = xin.to(DType::bf16).to(DType::f32).to_vector<float>();
    for (size_t i = 0; i < in.size(); ++i) {
      const float want = kernels[k](in[i]);
      ASSERT_EQ(std::memcmp(&contiguous[i], &want, 4), 0) << name << " element " << i;
      ASSERT_EQ(std::memcmp(&strided[i], &want, 4), 0) << name << " strided element " << i;
      ASSERT_EQ(bf[i], double(float(bf16(kernels[k](in_bf[i]))))) << name << " bf16 element " << i;
    }
  }
  }
}

// The activations' tails, subnormal x and special points (ops_test_util.h): the vector loop gives
// the scalar kernels' bits there too.
TEST(OpsUnary, ActivationTailsAreTheScalarKernelBitwise) {
  const ScopedActivationPath portable(ActivationPath::portable);  // activation_fma_test has its own
  const std::vector<float> xs = test::activation_tail_inputs();
  const Tensor x = Tensor::from_vector(xs, {int64_t(xs.size())});
  struct Case {
    const char* name;
    Tensor got;
    float (*f)(float);
  };
  for (const Case& c : {Case{"exp", exp(x), kernel::exp_f32}, Case{"tanh", tanh(x), kernel::tanh_f32},
                        Case{"sigmoid", sigmoid(x), kernel::sigmoid_f32}, Case{"silu", silu(x), kernel::silu_f32},
                        Case{"gelu", gelu(x), kernel::gelu_f32}, Case{"gelu_tanh", gelu(x, "tanh"), kernel::gelu_tanh_f32}}) {
    const std::vector<float> got = c.got.to_vector<float>();
    int mismatches = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = c.f(xs[i]);
      if (std::memcmp(&want, &got[i], sizeof(float)) != 0 && mismatches++ < 3)
        ADD_FAILURE() << c.name << " at x = " << xs[i] << ": " << got[i] << " vs " << want;
    }
    EXPECT_EQ(mismatches, 0) << c.name;
  }
}

// On ordinary inputs (|x| <= 8, where every result and every intermediate of the formulas is a
// normal number) the activation loops compute no subnormal: see ops_grad_test.cc for why this is
// asserted (a slow path for every element when it fails).
TEST(OpsUnary, ActivationsComputeNoSubnormalOnOrdinaryInputs) {
  const Tensor x = uniform({4099}, DType::f32, 8, -8, 8);
  const Tensor pos = uniform({4099}, DType::f32, 9, 1e-3, 16);
  const std::vector<std::pair<const char*, std::function<void()>>> ops = {
      {"exp", [&] { exp(x); }},         {"log", [&] { log(pos); }},         {"tanh", [&] { tanh(x); }},
      {"sigmoid", [&] { sigmoid(x); }}, {"silu", [&] { silu(x); }},         {"gelu", [&] { gelu(x); }},
      {"gelu_tanh", [&] { gelu(x, "tanh"); }}};
  for (const auto& [name, op] : ops) EXPECT_FALSE(test::computes_subnormals(op)) << name;
}

TEST(OpsUnary, IntegerNegReluAndScalarOps) {
  Tensor x = Tensor::from_vector<int64_t>({-3, 0, 5, INT64_MIN}, {4});
  EXPECT_EQ(neg(x).to_vector<int64_t>(), (std::vector<int64_t>{3, 0, -5, INT64_MIN}));  // wraps like torch
  EXPECT_EQ(relu(x).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 5, 0}));
  Tensor y = Tensor::from_vector<int32_t>({1, -2, 3}, {3});
  EXPECT_EQ(add(y, 2.0).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, 5}));
  EXPECT_EQ(mul(y, -3.0).to_vector<int32_t>(), (std::vector<int32_t>{-3, 6, -9}));
}

TEST(OpsUnary, ReluAndMaximumKeepNaN) {
  Tensor x = Tensor::from_doubles({NAN, -1, 2}, {3});
  std::vector<double> r = relu(x).to_doubles();
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_EQ(r[1], 0);
  EXPECT_EQ(r[2], 2);
}

TEST(OpsUnary, CastRoundsToNearestEvenAndCopies) {
  // 1 + 2^-8 is halfway between two bf16 values: rounds to even (1.0); 1 + 3*2^-8 rounds up.
  Tensor x = Tensor::from_doubles({1.0 + 1.0 / 256, 1.0 + 3.0 / 256, -2.5}, {3}, DType::f32);
  EXPECT_EQ(cast(x, DType::bf16).to_doubles(), (std::vector<double>{1.0, 1.0 + 4.0 / 256, -2.5}));
  EXPECT_EQ(cast(x, DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, -2}));
  Tensor same = cast(x, DType::f32);
  EXPECT_FALSE(same.shares_storage_with(x));
  EXPECT_EQ(same.to_doubles(), x.to_doubles());
  EXPECT_EQ(cast(x.transpose(0, 0), DType::f64).dtype(), DType::f64);
}

TEST(OpsUnary, IsDeterministic) {
  Tensor x = uniform({257, 33}, DType::f32, 5);
  Tensor a = gelu(x), b = gelu(x);
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
}

TEST(OpsUnary, RejectsUnsupportedDtype) {
  Tensor i = Tensor::zeros({2}, DType::i64);
  expect_error<DTypeError>([&] { exp(i); }, {"exp", "i64"});
  expect_error<DTypeError>([&] { neg(Tensor::zeros({2}, DType::boolean)); }, {"neg", "bool"});
  expect_error<DTypeError>([&] { add(i, 0.5); }, {"add", "0.5", "i64"});
}

TEST(OpsUnary, IntegerAbsAndClampAndNaNClamp) {
  Tensor i = Tensor::from_vector<int64_t>({-3, 0, 7}, {3});
  EXPECT_EQ(abs(i).to_doubles(), (std::vector<double>{3, 0, 7}));
  EXPECT_EQ(clamp(i, -1, 5).to_doubles(), (std::vector<double>{-1, 0, 5}));
  EXPECT_TRUE(std::isnan(clamp(Tensor::full({1}, NAN), 0, 1).to_doubles()[0]));
}

TEST(OpsUnary, RejectsBadGeluApproximation) {
  expect_error<ValueError>([] { gelu(Tensor::zeros({2}), "fast"); }, {"gelu", "fast"});
}

}  // namespace
}  // namespace dt
