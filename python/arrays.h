// numpy arrays in and out of the library without copies where the layout allows.
//
// In: a C-contiguous array of a supported dtype becomes a Tensor over the array's own memory (the
// Tensor keeps the array alive); any other array is converted once (counted in bytes_copied()).
// Out: a Tensor becomes an array over the Tensor's storage, which a capsule keeps alive.
//
// dtypes: float32, float64, float16, int64, int32 and bool map to f32, f64, f16, i64, i32 and bool.
// numpy has no bfloat16: a bf16 tensor comes back as a uint16 array of its bit patterns (the top
// half of the f32), and a uint16 array going in is read as bf16 bit patterns. Other dtypes are a
// TypeError naming the argument.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "dtensor/core/tensor.h"

namespace dt::python {

namespace py = pybind11;

// Returns `obj` (an ndarray, or anything np.asarray takes) as a Tensor; `arg` names the argument
// in errors ("x", "inputs['input']").
Tensor to_tensor(py::handle obj, const std::string& arg);
// Returns a dict of name -> ndarray as a name -> Tensor map.
std::map<std::string, Tensor> to_tensor_map(const py::dict& arrays, const std::string& arg);

// Returns an ndarray viewing t's elements; the array keeps t's storage alive.
py::array to_numpy(const Tensor& t);
py::dict to_numpy_dict(const std::map<std::string, Tensor>& tensors);

// Bytes copied by the conversions above since the module was loaded (the zero-copy check).
std::atomic<int64_t>& bytes_copied();

// Returns a shape as a tuple of ints.
py::tuple shape_tuple(const Shape& shape);

// Returns the numpy dtype name of a library dtype ("float32"; bf16 is "uint16").
std::string numpy_dtype_name(DType t);

}  // namespace dt::python
