#include "python/arrays.h"

#include <bit>

#include "dtensor/core/error.h"

namespace dt::python {
namespace {

// Returns the library dtype of a numpy dtype; throws TypeError naming `arg` for the others.
DType dtype_of(const py::dtype& d, const std::string& arg) {
  char kind = d.kind();
  size_t size = size_t(d.itemsize());
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 8) return DType::f64;
  if (kind == 'f' && size == 2) return DType::f16;
  if (kind == 'i' && size == 8) return DType::i64;
  if (kind == 'i' && size == 4) return DType::i32;
  if (kind == 'b' && size == 1) return DType::boolean;
  if (kind == 'u' && size == 2) return DType::bf16;  // bf16 bit patterns (arrays.h)
  throw py::type_error(arg + ": dtype " + std::string(py::str(d.attr("name"))) +
                       " is not supported (float32, float64, float16, int64, int32, bool, or uint16 holding "
                       "bfloat16 bits)");
}

// Keeps a Python object alive from C++ without holding the GIL: the last owner may be any thread
// (a rank thread dropping its shard), so the reference is released under the GIL.
std::shared_ptr<void> keep_alive(py::object obj) {
  return std::shared_ptr<void>(new py::object(std::move(obj)), [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
}

}  // namespace

std::atomic<int64_t>& bytes_copied() {
  static std::atomic<int64_t> n{0};
  return n;
}

py::tuple shape_tuple(const Shape& shape) {
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t[i] = py::int_(shape[i]);
  return t;
}

std::string numpy_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "uint16";
    case DType::i64: return "int64";
    case DType::i32: return "int32";
    case DType::boolean: return "bool";
  }
  return "?";
}

Tensor to_tensor(py::handle obj, const std::string& arg) {
  py::array a;
  if (py::isinstance<py::array>(obj)) {
    a = py::reinterpret_borrow<py::array>(obj);
  } else {
    // A list, a scalar or any object with __array__: one conversion, counted.
    try {
      a = py::module_::import("numpy").attr("asarray")(obj);
    } catch (py::error_already_set&) {
      throw py::type_error(arg + ": expected a numpy array, got " + std::string(py::str(py::type::of(obj))));
    }
    if (a.dtype().kind() == 'O')
      throw py::type_error(arg + ": expected a numpy array, got " + std::string(py::str(py::type::of(obj))));
    if (a.dtype().kind() == 'f' && a.itemsize() == 8 && !py::isinstance<py::array>(obj))
      a = a.attr("astype")("float32");  // Python floats are f64; a list of them means f32 data
    bytes_copied() += int64_t(a.nbytes());
  }
  DType dtype = dtype_of(a.dtype(), arg);
  const char order = a.dtype().byteorder();  // '=' native, '|' not applicable, '<' / '>' explicit
  const bool native = order == '=' || order == '|' || order == (std::endian::native == std::endian::big ? '>' : '<');
  if (!(a.flags() & py::array::c_style) || !native) {
    a = py::module_::import("numpy").attr("ascontiguousarray")(a, a.dtype().attr("newbyteorder")("="));
    bytes_copied() += int64_t(a.nbytes());
  }
  Shape shape(a.shape(), a.shape() + a.ndim());
  size_t nbytes = size_t(a.nbytes());
  // The library never writes into a bound input (run and train copy what they update), so a
  // read-only array is wrapped as well.
  void* data = const_cast<void*>(a.data());
  auto storage = Storage::wrap(data, nbytes, keep_alive(a));
  return Tensor::from_storage(std::move(storage), dtype, shape, contiguous_strides(shape), 0);
}

std::map<std::string, Tensor> to_tensor_map(const py::dict& arrays, const std::string& arg) {
  std::map<std::string, Tensor> out;
  for (auto [k, v] : arrays) {
    if (!py::isinstance<py::str>(k))
      throw py::type_error(arg + ": keys must be str, got " + std::string(py::str(py::type::of(k))));
    std::string name = k.cast<std::string>();
    out[name] = to_tensor(v, arg + "['" + name + "']");
  }
  return out;
}

// Returns the numpy dtype of a library dtype (made once per dtype: building one from its name
// parses the name each time).
const py::dtype& numpy_dtype(DType t) {
  static const py::dtype* dtypes[kNumDTypes] = {
      new py::dtype(py::dtype::of<float>()),   new py::dtype(py::dtype::of<double>()),
      new py::dtype(py::dtype::of<uint16_t>()), new py::dtype("float16"),
      new py::dtype(py::dtype::of<int64_t>()), new py::dtype(py::dtype::of<int32_t>()),
      new py::dtype(py::dtype::of<bool>())};
  static_assert(int(DType::f32) == 0 && int(DType::f64) == 1 && int(DType::bf16) == 2 && int(DType::f16) == 3 &&
                int(DType::i64) == 4 && int(DType::i32) == 5 && int(DType::boolean) == 6);
  return *dtypes[int(t)];
}

py::array to_numpy(const Tensor& t) {
  DT_CHECK(t.defined()) << "an undefined tensor reached the Python boundary";
  size_t item = itemsize(t.dtype());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(py::ssize_t(s * int64_t(item)));
  auto* owner = new Tensor(t);
  py::capsule keep(owner, [](void* p) { delete static_cast<Tensor*>(p); });
  py::array a(numpy_dtype(t.dtype()), shape, strides, t.raw_data(), keep);
  if (t.storage()->read_only()) a.attr("flags").attr("writeable") = false;  // a file's bytes (tensor.h)
  return a;
}

py::dict to_numpy_dict(const std::map<std::string, Tensor>& tensors) {
  py::dict d;
  for (const auto& [name, t] : tensors) d[py::str(name)] = to_numpy(t);
  return d;
}

}  // namespace dt::python
