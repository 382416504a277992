// conv, conv_backward_input and conv_backward_weight: the forward against a direct loop over the
// definition (in f64) for 1-d and 2-d cases with groups, strides, asymmetric pads and dilations;
// a value worked out by hand; the backward kernels against the adjoint identities
//   <conv(x, w), dy> = <x, conv_backward_input(dy, w)> = <w, conv_backward_weight(dy, x)>
// (conv is linear in x and in w without bias); every refused shape.
#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using test::expect_error;
using test::uniform;

struct ConvCase {
  Shape x, w;
  ConvParams p;
};

// y[n, o, oh, ow] by the definition, over x and w as doubles (2-d; 1-d cases as h = 1).
std::vector<double> direct_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p, const Shape& y) {
  const bool one = x.dim() == 3;
  const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles();
  const int64_t N = x.shape()[0], C = x.shape()[1], H = one ? 1 : x.shape()[2], W = x.shape().back();
  const int64_t O = w.shape()[0], Cg = w.shape()[1], KH = one ? 1 : w.shape()[2], KW = w.shape().back();
  const int64_t OH = one ? 1 : y[2], OW = y.back(), Og = O / p.groups;
  const int64_t sh = one ? 1 : p.stride[0], sw = p.stride.back(), dh = one ? 1 : p.dilation[0], dw = p.dilation.back();
  const int64_t pt = one ? 0 : p.padding[0], pl = one ? p.padding[0] : p.padding[1];
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b.defined() ? b.to_doubles()[size_t(o)] : 0;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t ih = oh * sh - pt + i * dh, iw = ow * sw - pl + j * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t ci = (o / Og) * Cg + c;
                acc += xv[size_t(((n * C + ci) * H + ih) * W + iw)] * wv[size_t(((o * Cg + c) * KH + i) * KW + j)];
              }
          out.push_back(acc);
        }
  EXPECT_EQ(int64_t(out.size()), C == 0 ? 0 : numel(y));
  return out;
}

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
  double s = 0;
  for (size_t i = 0; i < av.size(); ++i) s += av[i] * bv[i];
  return s;
}

std::vector<ConvCase> cases() {
  return {
      {{2, 4, 11}, {6, 2, 3}, {{2}, {1, 1}, {2}, 2}},                   // 1-d, groups 2, stride, pad, dilation
      {{1, 3, 7}, {5, 3, 2}, {{1}, {0, 0}, {1}, 1}},                    // 1-d plain
      {{2, 4, 9, 8}, {6, 2, 3, 2}, {{2, 1}, {1, 0, 1, 0}, {1, 2}, 2}},  // the worked example of ops_conv.cc
      {{1, 3, 5, 6}, {6, 1, 3, 3}, {{1, 1}, {1, 1, 1, 1}, {1, 1}, 3}},  // depthwise
      {{2, 3, 8, 12}, {8, 3, 4, 4}, {{4, 4}, {0, 0, 0, 0}, {1, 1}, 1}}, // a ViT patch embedding
      {{1, 2, 5, 5}, {3, 2, 2, 3}, {{2, 3}, {0, 2, 1, 0}, {1, 1}, 1}},  // asymmetric pads
      {{3, 1, 7, 1}, {2, 1, 3, 1}, {{1, 1}, {0, 0, 0, 0}, {3, 1}, 1}},  // width 1, dilation 3 (span 7)
      // 1x1 kernels at stride 1 without padding multiply x's planes in place (no im2col buffer)
      {{2, 6, 5, 4}, {4, 3, 1, 1}, {{1, 1}, {0, 0, 0, 0}, {2, 3}, 2}},  // groups 2 (dilation moot)
      {{2, 4, 7}, {3, 4, 1}, {{1}, {0, 0}, {1}, 1}},                     // 1-d
      {{1, 3, 4, 4}, {5, 3, 1, 1}, {{1, 1}, {0, 0, 1, 1}, {1, 1}, 1}},  // 1x1 with trailing pads: im2col
      {{1, 3, 5, 5}, {2, 3, 1, 1}, {{2, 2}, {0, 0, 0, 0}, {1, 1}, 1}},  // 1x1 at stride 2: im2col
  };
}

TEST(OpsConv, ForwardMatchesTheDefinition) {
  uint64_t seed = 1;
  for (const ConvCase& c : cases()) {
    for (bool with_bias : {true, false}) {
      const Tensor x = uniform(c.x, DType::f32, seed++), w = uniform(c.w, DType::f32, seed++);
      const Tensor b = with_bias ? uniform({c.w[0]}, DType::f32, seed++) : Tensor();
      const Tensor y = conv(x, w, b, c.p);
      EXPECT_EQ(y.shape(), conv_output_shape(c.x, c.w, c.p));
      test::expect_values(y, direct_conv(x, w, b, c.p, y.shape()), 1e-5, 1e-5, shape_str(c.x) + " * " + shape_str(c.w));
      // f64 and bf16 take the same path.
      const Tensor y64 = conv(cast(x, DType::f64), cast(w, DType::f64), b.defined() ? cast(b, DType::f64) : b, c.p);
      test::expect_values(y64, direct_conv(x, w, b, c.p, y.shape()), 1e-12, 1e-12, "f64");
      EXPECT_EQ(conv(cast(x, DType::bf16), cast(w, DType::bf16), Tensor(), c.p).dtype(), DType::bf16);
    }
  }
}

TEST(OpsConv, ByHand) {
  // x = [1 2 3 4], w = [1 -1], pads (1, 0): y = [0·1 + 1·-1, 1 - 2, 2 - 3, 3 - 4] + bias 10.
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 4});
  const Tensor w = Tensor::from_vector<float>({1, -1}, {1, 1, 2});
  const Tensor y = conv(x, w, Tensor::from_vector<float>({10}, {1}), {{1}, {1, 0}, {1}, 1});
  test::expect_values(y, {9, 9, 9, 9}, 0, 0, "by hand");
  // Stride 2 with an output cut by the floor: (4 + 1 - 2) / 2 + 1 = 2 positions.
  EXPECT_EQ(conv(x, w, Tensor(), {{2}, {1, 0}, {1}, 1}).shape(), (Shape{1, 1, 2}));
}

TEST(OpsConv, BackwardKernelsAreTheAdjoints) {
  uint64_t seed = 100;
  for (const ConvCase& c : cases()) {
    const Tensor x = uniform(c.x, DType::f64, seed++), w = uniform(c.w, DType::f64, seed++);
    const Tensor y = conv(x, w, Tensor(), c.p);
    const Tensor dy = uniform(y.shape(), DType::f64, seed++);
    const Tensor dx = conv_backward_input(dy, w, c.x, c.p);
    const Tensor dw = conv_backward_weight(dy, x, c.w, c.p);
    EXPECT_EQ(dx.shape(), c.x);
    EXPECT_EQ(dw.shape(), c.w);
    const double want = dot(y, dy);
    EXPECT_NEAR(dot(x, dx), want, 1e-9 * std::max(1.0, std::abs(want))) << shape_str(c.x);
    EXPECT_NEAR(dot(w, dw), want, 1e-9 * std::max(1.0, std::abs(want))) << shape_str(c.x);
    // f32 agrees with f64.
    const Tensor dx32 = conv_backward_input(cast(dy, DType::f32), cast(w, DType::f32), c.x, c.p);
    test::expect_values(dx32, dx.to_doubles(), 1e-5, 1e-5, "dx f32");
    const Tensor dw32 = conv_backward_weight(cast(dy, DType::f32), cast(x, DType::f32), c.w, c.p);
    test::expect_values(dw32, dw.to_doubles(), 1e-5, 1e-5, "dw f32");
  }
}

TEST(OpsConv, RefusesBadShapes) {
  const ConvParams p1{{1}, {0, 0}, {1}, 1};
  expect_error<ShapeError>([&] { conv_output_shape({2, 3}, {4, 3}, p1); }, {"rank 3 (1-d) or 4 (2-d)", "[2, 3]"});
  expect_error<ShapeError>([&] { conv_output_shape({2, 3, 5}, {4, 3, 1, 1}, p1); }, {"does not have the rank of x"});
  expect_error<ValueError>([&] { conv_output_shape({2, 3, 5, 5}, {4, 3, 1, 1}, p1); }, {"needs 2 strides, 2 dilations and 4 pads"});
  expect_error<ValueError>([&] { conv_output_shape({2, 3, 5}, {4, 1, 1}, {{1}, {0, 0}, {1}, 2}); }, {"groups 2 must divide the 3 input"});
  expect_error<ShapeError>([&] { conv_output_shape({2, 4, 5}, {4, 4, 1}, {{1}, {0, 0}, {1}, 2}); }, {"4 input channels per group", "2 group(s)"});
  expect_error<ValueError>([&] { conv_output_shape({2, 3, 5}, {4, 3, 1}, {{0}, {0, 0}, {1}, 1}); }, {"stride 0"});
  expect_error<ShapeError>([&] { conv_output_shape({2, 3, 5}, {4, 3, 3}, {{1}, {0, 0}, {3}, 1}); }, {"kernel 3 (dilation 3) does not fit", "size 5 padded to 5"});
  expect_error<ShapeError>([&] { conv(Tensor::zeros({1, 1, 4}), Tensor::zeros({2, 1, 2}), Tensor::zeros({3}), p1); }, {"bias [3]"});
  expect_error<DTypeError>([&] { conv(Tensor::zeros({1, 1, 4}, DType::i64), Tensor::zeros({2, 1, 2}, DType::i64), Tensor(), p1); }, {"floating"});
  expect_error<ShapeError>([&] { conv_backward_input(Tensor::zeros({1, 2, 4}), Tensor::zeros({2, 1, 2}), {1, 1, 4}, p1); }, {"not the output shape"});
}

}  // namespace
}  // namespace dt
