// Models: load, import_onnx, run, compile, train, save_weights (python/model.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace dt::python {

void bind_model(pybind11::module_& m);

}  // namespace dt::python
