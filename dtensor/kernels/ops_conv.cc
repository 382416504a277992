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
// Each of the three is one GEMM per (image, group) through the GEMM behind mm (gemm_into), on the
// rank's threads in its row panels, so results do not depend on the thread count.
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

// Image n's rows [grp·rows, (grp + 1)·rows) of a contiguous tensor whose `images` images each hold
// groups·rows rows of `cols` elements: one (image, group) block, a contiguous [rows, cols] matrix.
// The weight is one image of O = groups·Og rows of taps.
Tensor block(const Tensor& t, int64_t images, int64_t groups, int64_t n, int64_t grp, int64_t rows, int64_t cols) {
  return t.view({images, groups * rows, cols}).select(0, n).narrow(0, grp * rows, rows);
}

// Calls f(n, grp) for every image n and group grp in order: each product below is one GEMM per pair.
template <typename F>
void for_each_image_group(const Geometry& g, F&& f) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) f(n, grp);
}

// The columns matrix [taps, positions] of each (image, group) of an input-shaped tensor (x, or dx
// in the input gradient). A 1x1 kernel at stride 1 without padding reads each input element once
// where it lies, so the columns are the tensor's own channel planes and nothing is copied;
// otherwise one buffer, reused for every pair, holds them (im2col fills it from x, col2im adds it
// into dx).
template <typename T>
class Columns {
 public:
  Columns(const Geometry& g, const Tensor& planes)
      : g_(g), planes_(planes),
        in_place_(g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 && g.oh == g.h &&
                  g.ow == g.w) {
    if (!in_place_) buffer_ = Tensor::uninitialized({g.taps(), g.positions()}, dtype_of<T>());
  }
  bool in_place() const { return in_place_; }
  // The matrix of (n, grp): the planes' block, or the buffer (contents unspecified).
  Tensor matrix(int64_t n, int64_t grp) const {
    return in_place_ ? block(planes_, g_.n, g_.groups, n, grp, g_.cg(), g_.positions()) : buffer_;
  }
  // The columns of (n, grp) read from x (the planes).
  Tensor read(int64_t n, int64_t grp) const {
    if (!in_place_) im2col(g_, planes_.data<T>(), n, grp, buffer_.data<T>());
    return matrix(n, grp);
  }
  // Adds the buffer, as written for (n, grp), into dx (the planes); in place it is there already.
  void add_back(int64_t n, int64_t grp) const {
    if (!in_place_) col2im(g_, buffer_.data<T>(), n, grp, planes_.data<T>());
  }

 private:
  const Geometry& g_;
  Tensor planes_, buffer_;
  bool in_place_;
};

// The weight's rows of group grp: [Og, taps].
Tensor weight_rows(const Geometry& g, const Tensor& w, int64_t grp) {
  return block(w, 1, g.groups, 0, grp, g.og(), g.taps());
}

// y[n, group rows] = bias + w[group rows] @ col.
template <typename T>
void conv_forward(const Geometry& g, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  const Columns<T> cols(g, x);
  for_each_image_group(g, [&](int64_t n, int64_t grp) {
    const Tensor out = block(y, g.n, g.groups, n, grp, g.og(), g.positions());
    if (bias.defined()) {
      const int64_t P = g.positions();
      for (int64_t r = 0; r < g.og(); ++r)
        std::fill(out.data<T>() + r * P, out.data<T>() + (r + 1) * P, bias.data<T>()[grp * g.og() + r]);
    }
    gemm_into(weight_rows(g, w, grp), cols.read(n, grp), out, bias.defined() ? 1 : 0);
  });
}

// dcol = w[group rows]ᵀ @ dy[n, group rows], added back into dx.
template <typename T>
void conv_grad_input(const Geometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  const Columns<T> cols(g, dx);
  for_each_image_group(g, [&](int64_t n, int64_t grp) {
    gemm_into(weight_rows(g, w, grp).transpose(0, 1), block(dy, g.n, g.groups, n, grp, g.og(), g.positions()),
              cols.matrix(n, grp), 0);
    cols.add_back(n, grp);
  });
}

// dw[group rows] += dy[n, group rows] @ colᵀ.
template <typename T>
void conv_grad_weight(const Geometry& g, const Tensor& dy, const Tensor& x, const Tensor& dw) {
  const Columns<T> cols(g, x);
  for_each_image_group(g, [&](int64_t n, int64_t grp) {
    gemm_into(block(dy, g.n, g.groups, n, grp, g.og(), g.positions()), cols.read(n, grp).transpose(0, 1),
              weight_rows(g, dw, grp), 1);
  });
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
  Tensor y = Tensor::uninitialized(conv_output_shape(x.shape(), weight.shape(), p), ct);
  if (ct == DType::f64) conv_forward<double>(g, xc, wc, bc, y);
  else conv_forward<float>(g, xc, wc, bc, y);
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
  if (ct == DType::f64) conv_grad_input<double>(g, dy, wc, dx);
  else conv_grad_input<float>(g, dy, wc, dx);
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
  if (ct == DType::f64) conv_grad_weight<double>(g, dy, xc, dw);
  else conv_grad_weight<float>(g, dy, xc, dw);
  return ct == grad.dtype() ? dw : cast(dw, grad.dtype());
}

}  // namespace dt
