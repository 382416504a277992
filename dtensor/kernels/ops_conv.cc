// Convolution (ops.h): forward, and the gradients for the input and the weight, by im2col.
//
// A 1-d convolution is the 2-d one with a height of 1 (kernel height 1, stride, dilation 1, no
// padding). For one image n and group g, the columns matrix holds, for every kernel tap r =
// (c, kh, kw) of the group's Cg input channels and every output position p = (oh, ow), the input
// element the tap reads there (0 in the padding):
//   col[r][p] = x[n, g·Cg + c, oh·sh - pad_top + kh·dh, ow·sw - pad_left + kw·dw]
// so that, with the weight viewed as [O, Cg·KH·KW] (its own row-major layout),
//   y[n, g·Og + o, p]      = bias[g·Og + o] + Σ_r w[g·Og + o, r] · col[r][p]
//   dcol[r][p]             = Σ_o w[g·Og + o, r] · dy[n, g·Og + o, p]   (then added back into dx:
//                                                                        col2im, the transpose)
//   dw[g·Og + o, r]       += Σ_p dy[n, g·Og + o, p] · col[r][p]        (summed over n)
// Worked example: x [2, 4, 9, 8], w [6, 2, 3, 2], groups 2, stride (2, 1), pads (1, 0, 1, 0),
// dilation (1, 2): out = ((9 + 2 - 2 - 1) / 2 + 1, (8 - 2 - 1) / 1 + 1) = (5, 6); Cg = 2, Og = 3,
// col is [2·3·2, 5·6] = [12, 30] per (n, g).
#include <algorithm>

#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"

namespace dt {
namespace {

// The sizes of one convolution, spatial dims as 2-d (a 1-d one has h = kh = oh = 1).
struct Geometry {
  int64_t n, c, h, w;      // input
  int64_t o, kh, kw;       // weight (c / groups input channels per group)
  int64_t oh, ow;          // output
  int64_t sh, sw, pt, pl, dh, dw, groups;
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  int64_t taps() const { return cg() * kh * kw; }
  int64_t positions() const { return oh * ow; }
};

Geometry geometry(const Shape& x, const Shape& weight, const ConvParams& p) {
  const Shape y = conv_output_shape(x, weight, p);
  const bool one = x.size() == 3;
  Geometry g;
  g.n = x[0];
  g.c = x[1];
  g.h = one ? 1 : x[2];
  g.w = x.back();
  g.o = weight[0];
  g.kh = one ? 1 : weight[2];
  g.kw = weight.back();
  g.oh = one ? 1 : y[2];
  g.ow = y.back();
  g.sh = one ? 1 : p.stride[0];
  g.sw = p.stride.back();
  g.pt = one ? 0 : p.padding[0];
  g.pl = one ? p.padding[0] : p.padding[1];
  g.dh = one ? 1 : p.dilation[0];
  g.dw = p.dilation.back();
  g.groups = p.groups;
  return g;
}

// Fills col [taps, positions] for image n, group grp.
template <typename T>
void im2col(const Geometry& g, const T* x, int64_t n, int64_t grp, T* col) {
  const int64_t P = g.positions();
  for (int64_t c = 0; c < g.cg(); ++c) {
    const T* plane = x + ((n * g.c) + grp * g.cg() + c) * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * P;
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          const int64_t ih = oh * g.sh - g.pt + i * g.dh;
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const int64_t iw = ow * g.sw - g.pl + j * g.dw;
            row[oh * g.ow + ow] = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w ? plane[ih * g.w + iw] : T(0);
          }
        }
      }
  }
}

// Adds col [taps, positions] into dx for image n, group grp (the transpose of im2col).
template <typename T>
void col2im(const Geometry& g, const T* col, int64_t n, int64_t grp, T* dx) {
  const int64_t P = g.positions();
  for (int64_t c = 0; c < g.cg(); ++c) {
    T* plane = dx + ((n * g.c) + grp * g.cg() + c) * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * P;
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          const int64_t ih = oh * g.sh - g.pt + i * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const int64_t iw = ow * g.sw - g.pl + j * g.dw;
            if (iw >= 0 && iw < g.w) plane[ih * g.w + iw] += row[oh * g.ow + ow];
          }
        }
      }
  }
}

template <typename T>
void conv_forward(const Geometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t P = g.positions(), R = g.taps();
  std::vector<T> col(size_t(R * P));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col(g, x, n, grp, col.data());
      for (int64_t o = grp * g.og(); o < (grp + 1) * g.og(); ++o) {
        T* out = y + (n * g.o + o) * P;
        std::fill(out, out + P, bias ? bias[o] : T(0));
        for (int64_t r = 0; r < R; ++r) {
          const T wr = w[o * R + r];
          const T* cr = col.data() + r * P;
          for (int64_t p = 0; p < P; ++p) out[p] += wr * cr[p];
        }
      }
    }
}

template <typename T>
void conv_grad_input(const Geometry& g, const T* dy, const T* w, T* dx) {
  const int64_t P = g.positions(), R = g.taps();
  std::vector<T> dcol(size_t(R * P));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      std::fill(dcol.begin(), dcol.end(), T(0));
      for (int64_t o = grp * g.og(); o < (grp + 1) * g.og(); ++o) {
        const T* d = dy + (n * g.o + o) * P;
        for (int64_t r = 0; r < R; ++r) {
          const T wr = w[o * R + r];
          T* cr = dcol.data() + r * P;
          for (int64_t p = 0; p < P; ++p) cr[p] += wr * d[p];
        }
      }
      col2im(g, dcol.data(), n, grp, dx);
    }
}

template <typename T>
void conv_grad_weight(const Geometry& g, const T* dy, const T* x, T* dw) {
  const int64_t P = g.positions(), R = g.taps();
  std::vector<T> col(size_t(R * P));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col(g, x, n, grp, col.data());
      for (int64_t o = grp * g.og(); o < (grp + 1) * g.og(); ++o) {
        const T* d = dy + (n * g.o + o) * P;
        for (int64_t r = 0; r < R; ++r) {
          const T* cr = col.data() + r * P;
          T acc = 0;
          for (int64_t p = 0; p < P; ++p) acc += d[p] * cr[p];
          dw[o * R + r] += acc;
        }
      }
    }
}

// The dtype a convolution computes in: f32 and f64 as they are, bf16 and f16 in f32.
DType compute_dtype(DType t, const char* what) {
  if (t == DType::f32 || t == DType::f64) return t;
  if (t == DType::bf16 || t == DType::f16) return DType::f32;
  DT_THROW(DTypeError) << what << " needs floating tensors, got " << dtype_name(t);
}

Tensor in_dtype(const Tensor& t, DType dtype) {
  return (t.dtype() == dtype ? t : cast(t, dtype)).contiguous();
}

}  // namespace

Shape conv_output_shape(const Shape& x, const Shape& weight, const ConvParams& p) {
  if (x.size() != 3 && x.size() != 4)
    DT_THROW(ShapeError) << "conv expects x of rank 3 (1-d) or 4 (2-d), got " << shape_str(x);
  const size_t sp = x.size() - 2;
  if (weight.size() != x.size())
    DT_THROW(ShapeError) << "conv weight " << shape_str(weight) << " does not have the rank of x " << shape_str(x);
  if (p.stride.size() != sp || p.dilation.size() != sp || p.padding.size() != 2 * sp)
    DT_THROW(ValueError) << "conv over " << sp << " spatial dims needs " << sp << " strides, " << sp << " dilations and "
                         << 2 * sp << " pads, got " << p.stride.size() << ", " << p.dilation.size() << " and "
                         << p.padding.size();
  if (p.groups < 1 || x[1] % p.groups != 0 || weight[0] % p.groups != 0)
    DT_THROW(ValueError) << "conv groups " << p.groups << " must divide the " << x[1] << " input and " << weight[0]
                         << " output channels";
  if (weight[1] * p.groups != x[1])
    DT_THROW(ShapeError) << "conv weight " << shape_str(weight) << " has " << weight[1] << " input channels per group but x "
                         << shape_str(x) << " has " << x[1] << " in " << p.groups << " group(s)";
  Shape y = {x[0], weight[0]};
  for (size_t i = 0; i < sp; ++i) {
    const int64_t s = p.stride[i], d = p.dilation[i], k = weight[2 + i];
    if (s < 1 || d < 1 || p.padding[i] < 0 || p.padding[sp + i] < 0)
      DT_THROW(ValueError) << "conv stride " << s << ", dilation " << d << " and pads " << p.padding[i] << ", "
                           << p.padding[sp + i] << " of spatial dim " << i << " must be positive (pads >= 0)";
    const int64_t span = d * (k - 1) + 1, padded = x[2 + i] + p.padding[i] + p.padding[sp + i];
    if (k < 1 || padded < span)
      DT_THROW(ShapeError) << "conv kernel " << k << " (dilation " << d << ") does not fit spatial dim " << i << " of size "
                           << x[2 + i] << " padded to " << padded;
    y.push_back((padded - span) / s + 1);
  }
  return y;
}

Tensor conv(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvParams& p) {
  const Geometry g = geometry(x.shape(), weight.shape(), p);
  if (bias.defined() && bias.shape() != Shape{g.o})
    DT_THROW(ShapeError) << "conv bias " << shape_str(bias.shape()) << " does not match " << g.o << " output channels";
  const DType ct = compute_dtype(x.dtype(), "conv");
  const Tensor xc = in_dtype(x, ct), wc = in_dtype(weight, ct);
  const Tensor bc = bias.defined() ? in_dtype(bias, ct) : Tensor();
  Tensor y = Tensor::empty(conv_output_shape(x.shape(), weight.shape(), p), ct);
  if (ct == DType::f64)
    conv_forward<double>(g, xc.data<double>(), wc.data<double>(), bc.defined() ? bc.data<double>() : nullptr, y.data<double>());
  else
    conv_forward<float>(g, xc.data<float>(), wc.data<float>(), bc.defined() ? bc.data<float>() : nullptr, y.data<float>());
  return ct == x.dtype() ? y : cast(y, x.dtype());
}

Tensor conv_backward_input(const Tensor& grad, const Tensor& weight, const Shape& input_shape, const ConvParams& p) {
  const Geometry g = geometry(input_shape, weight.shape(), p);
  if (grad.shape() != conv_output_shape(input_shape, weight.shape(), p))
    DT_THROW(ShapeError) << "conv_backward_input grad " << shape_str(grad.shape()) << " is not the output shape of x "
                         << shape_str(input_shape) << " and weight " << shape_str(weight.shape());
  const DType ct = compute_dtype(grad.dtype(), "conv_backward_input");
  const Tensor dy = in_dtype(grad, ct), wc = in_dtype(weight, ct);
  Tensor dx = Tensor::zeros(input_shape, ct);
  if (ct == DType::f64) conv_grad_input<double>(g, dy.data<double>(), wc.data<double>(), dx.data<double>());
  else conv_grad_input<float>(g, dy.data<float>(), wc.data<float>(), dx.data<float>());
  return ct == grad.dtype() ? dx : cast(dx, grad.dtype());
}

Tensor conv_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape, const ConvParams& p) {
  const Geometry g = geometry(x.shape(), weight_shape, p);
  if (grad.shape() != conv_output_shape(x.shape(), weight_shape, p))
    DT_THROW(ShapeError) << "conv_backward_weight grad " << shape_str(grad.shape()) << " is not the output shape of x "
                         << shape_str(x.shape()) << " and weight " << shape_str(weight_shape);
  const DType ct = compute_dtype(grad.dtype(), "conv_backward_weight");
  const Tensor dy = in_dtype(grad, ct), xc = in_dtype(x, ct);
  Tensor dw = Tensor::zeros(weight_shape, ct);
  if (ct == DType::f64) conv_grad_weight<double>(g, dy.data<double>(), xc.data<double>(), dw.data<double>());
  else conv_grad_weight<float>(g, dy.data<float>(), xc.data<float>(), dw.data<float>());
  return ct == grad.dtype() ? dw : cast(dw, grad.dtype());
}

}  // namespace dt
