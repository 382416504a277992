#include <cmath>

#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using test::broadcast_index;
using test::expect_error;
using test::expect_values;
using test::rtol_for;
using test::uniform;

// Returns |a| (pow is tested on non-negative bases so the reference stays real).
Tensor abs_input(const Tensor& a) { return where(lt(a, Tensor::zeros({}, a.dtype())), neg(a), a); }

int64_t sum_bools(const Tensor& t) {
  int64_t n = 0;
  for (double v : t.to_doubles()) n += v != 0;
  return n;
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  bool ints;  // also defined for integer dtypes
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double x, double y) { return x + y; }, true},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double x, double y) { return x - y; }, true},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double x, double y) { return x * y; }, true},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double x, double y) { return x / y; }, false},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs_input(a), b); },
       [](double x, double y) { return std::pow(std::fabs(x), y); }, false},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double x, double y) { return std::max(x, y); }, true},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double x, double y) { return std::min(x, y); }, true},
  };
}

// (a shape, b shape) pairs covering same shape, trailing broadcast, both-sided broadcast, rank
// extension, scalars and empty results.
std::vector<std::pair<Shape, Shape>> shape_pairs() {
  return {{{4, 6}, {4, 6}}, {{4, 6}, {6}},       {{4, 1}, {1, 6}}, {{3, 1, 5}, {4, 1}},
          {{2, 3}, {}},     {{}, {2, 3}},        {{0, 3}, {3}},    {{5, 0}, {5, 1}},
          {{1}, {7}},       {{2, 3, 4}, {2, 3, 4}}};
}

// Returns the reference f(a, b) over the broadcast shape, in double.
std::vector<double> reference(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape out = broadcast_shapes(a.shape(), b.shape());
  const std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
  std::vector<double> r(size_t(numel(out)));
  for (int64_t i = 0; i < numel(out); ++i)
    r[size_t(i)] = f(av[size_t(broadcast_index(a.shape(), out, i))], bv[size_t(broadcast_index(b.shape(), out, i))]);
  return r;
}

TEST(OpsBinary, MatchesReferenceWithBroadcasting) {
  for (const BinaryCase& c : binary_cases()) {
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32}) {
      if (!is_floating(dtype) && !c.ints) continue;
      uint64_t seed = 100;
      for (auto& [sa, sb] : shape_pairs()) {
        Tensor a = uniform(sa, dtype, ++seed, -9, 9);
        Tensor b = uniform(sb, dtype, ++seed, 0.5, 3);  // positive: div and pow stay finite
        Tensor y = c.op(a, b);
        const std::string what = std::string(c.name) + " " + std::string(dtype_name(dtype)) + " " +
                                 shape_str(sa) + " " + shape_str(sb);
        EXPECT_EQ(y.shape(), broadcast_shapes(sa, sb)) << what;
        EXPECT_EQ(y.dtype(), dtype) << what;
        expect_values(y, reference(a, b, c.ref), rtol_for(dtype) * 2, dtype == DType::f32 ? 1e-6 : 1e-12, what);
      }
    }
  }
}

TEST(OpsBinary, NonContiguousOperands) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor at = uniform({6, 4}, dtype, 1).transpose(0, 1);       // [4, 6] transposed view
    Tensor bs = uniform({4, 12}, dtype, 2).slice(1, 0, 12, 2);   // [4, 6] strided slice
    Tensor be = uniform({6}, dtype, 3).unsqueeze(0).expand({4, 6});  // [4, 6] stride 0
    for (const Tensor& b : {bs, be}) {
      Tensor y = add(at, b);
      expect_values(y, reference(at, b, [](double x, double z) { return x + z; }), rtol_for(dtype), 1e-6);
      Tensor z = mul(b, at.slice(0, 1, 3).select(0, 0));  // row view broadcast against [4, 6]
      expect_values(z, reference(b, at.slice(0, 1, 3).select(0, 0), [](double x, double w) { return x * w; }),
                    rtol_for(dtype), 1e-6);
    }
  }
}

TEST(OpsBinary, Bf16RowsAreTheF32ResultRoundedOnceInEveryLayout) {
  // Contiguous bf16 rows run in blocks of widened values (elementwise.h); strided rows element by
  // element. Both give bf16(float(a) op float(b)) bit for bit, at every length around the block
  // size (0, 1, a block, a block and one, several blocks and a tail).
  using F = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<F, float (*)(float, float)>> ops = {
      {add, [](float x, float y) { return x + y; }},
      {sub, [](float x, float y) { return x - y; }},
      {mul, [](float x, float y) { return x * y; }},
      {div, [](float x, float y) { return x / y; }}};
  for (int64_t n : {0, 1, 255, 256, 257, 1000}) {
    const Tensor a = uniform({n}, DType::bf16, 11, -9, 9), b = uniform({n}, DType::bf16, 12, 0.5, 3);
    const Tensor b_strided = uniform({n, 2}, DType::bf16, 13, 0.5, 3).select(1, 0);  // stride 2
    const std::vector<float> av = a.to(DType::f32).to_vector<float>(), bv = b.to(DType::f32).to_vector<float>();
    for (const auto& [op, f] : ops) {
      const Tensor y = op(a, b);
      const bf16* yp = static_cast<const bf16*>(y.raw_data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(yp[i].bits, bf16(f(av[size_t(i)], bv[size_t(i)])).bits) << "n " << n << " element " << i;
      const std::vector<double> strided = op(a, b_strided).to_doubles();
      const std::vector<double> contiguous = op(a, b_strided.contiguous()).to_doubles();
      EXPECT_EQ(strided, contiguous) << "n " << n;
    }
  }
}

TEST(OpsBinary, IntegerArithmeticIsExactAndWraps) {
  Tensor a = Tensor::from_vector<int64_t>({INT64_MAX, 7, -9}, {3});
  Tensor b = Tensor::from_vector<int64_t>({1, 3, 4}, {3});
  EXPECT_EQ(add(a, b).to_vector<int64_t>(), (std::vector<int64_t>{INT64_MIN, 10, -5}));
  EXPECT_EQ(mul(a, b).to_vector<int64_t>(), (std::vector<int64_t>{INT64_MAX, 21, -36}));
  // Exact beyond 2^53, where a double reference would round.
  Tensor big = Tensor::from_vector<int64_t>({(int64_t(1) << 60) + 1}, {1});
  EXPECT_EQ(sub(big, Tensor::from_vector<int64_t>({1}, {1})).to_vector<int64_t>()[0], int64_t(1) << 60);
}

TEST(OpsBinary, MaximumMinimumPropagateNaN) {
  Tensor a = Tensor::from_doubles({NAN, 1, 2}, {3});
  Tensor b = Tensor::from_doubles({0, NAN, 1}, {3});
  std::vector<double> mx = maximum(a, b).to_doubles(), mn = minimum(a, b).to_doubles();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]));
  EXPECT_TRUE(std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mx[2], 2);
  EXPECT_EQ(mn[2], 1);
}

TEST(OpsBinary, ComparisonsReturnBool) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i64, DType::i32, DType::boolean}) {
    Tensor a = uniform({3, 5}, dtype, 7, -3, 3);
    Tensor b = uniform({5}, dtype, 8, -3, 3);
    const std::vector<std::pair<std::function<Tensor(const Tensor&, const Tensor&)>,
                                std::function<double(double, double)>>>
        cmps = {{[](auto& x, auto& y) { return eq(x, y); }, [](double x, double y) { return double(x == y); }},
                {[](auto& x, auto& y) { return ne(x, y); }, [](double x, double y) { return double(x != y); }},
                {[](auto& x, auto& y) { return lt(x, y); }, [](double x, double y) { return double(x < y); }},
                {[](auto& x, auto& y) { return le(x, y); }, [](double x, double y) { return double(x <= y); }},
                {[](auto& x, auto& y) { return gt(x, y); }, [](double x, double y) { return double(x > y); }},
                {[](auto& x, auto& y) { return ge(x, y); }, [](double x, double y) { return double(x >= y); }}};
    for (auto& [op, ref] : cmps) {
      Tensor y = op(a, b);
      EXPECT_EQ(y.dtype(), DType::boolean);
      expect_values(y, reference(a, b, ref), 0, 0, std::string(dtype_name(dtype)));
    }
    // Equal values compare equal (a against itself).
    EXPECT_EQ(sum_bools(eq(a, a)), a.numel());
  }
}

TEST(OpsBinary, WhereBroadcastsAllThree) {
  Tensor cond = gt(uniform({4, 1}, DType::f32, 1), Tensor::zeros({}));
  Tensor a = uniform({1, 5}, DType::bf16, 2);
  Tensor b = uniform({4, 5}, DType::bf16, 3).transpose(0, 1).contiguous().transpose(0, 1);
  Tensor y = where(cond, a, b);
  ASSERT_EQ(y.shape(), (Shape{4, 5}));
  std::vector<double> c = cond.to_doubles(), av = a.to_doubles(), bv = b.to_doubles(), want(20);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) want[size_t(i * 5 + j)] = c[size_t(i)] ? av[size_t(j)] : bv[size_t(i * 5 + j)];
  expect_values(y, want, 0, 0);
  EXPECT_EQ(where(Tensor::zeros({0}, DType::boolean), Tensor::zeros({0}, DType::i64), Tensor::zeros({}, DType::i64))
                .shape(),
            (Shape{0}));
}

TEST(OpsBinary, IsDeterministic) {
  Tensor a = uniform({1000, 37}, DType::f32, 1), b = uniform({37}, DType::f32, 2);
  Tensor x = div(a, b), y = div(a, b);
  EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0);
}

TEST(OpsBinary, ShapeMismatchNamesBothShapes) {
  expect_error<ShapeError>([] { add(Tensor::zeros({2, 3}), Tensor::zeros({4})); }, {"add", "[2, 3]", "[4]"});
  expect_error<ShapeError>([] { where(Tensor::zeros({2}, DType::boolean), Tensor::zeros({3}), Tensor::zeros({3})); },
                           {"where", "[2]", "[3]"});
}

TEST(OpsBinary, DtypeErrors) {
  expect_error<DTypeError>([] { add(Tensor::zeros({2}), Tensor::zeros({2}, DType::f64)); },
                           {"add", "f32", "f64"});
  expect_error<DTypeError>([] { div(Tensor::zeros({2}, DType::i64), Tensor::zeros({2}, DType::i64)); },
                           {"div", "i64"});
  expect_error<DTypeError>([] { add(Tensor::zeros({2}, DType::boolean), Tensor::zeros({2}, DType::boolean)); },
                           {"add", "bool"});
  expect_error<DTypeError>([] { where(Tensor::zeros({2}), Tensor::zeros({2}), Tensor::zeros({2})); },
                           {"where", "bool", "f32"});
}

}  // namespace
}  // namespace dt
