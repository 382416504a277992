// dtensor._dtensor: the compiled part of the Python package (python/dtensor/__init__.py wraps it
// in the PyTorch-style API; docs/python.md). A thin layer over the library: conversions of
// arguments and results, the GIL released while ranks run, errors translated (errors.h).
#include <pybind11/pybind11.h>

#include "python/arrays.h"
#include "python/dtensor.h"
#include "python/errors.h"
#include "python/model.h"
#include "python/world.h"

PYBIND11_MODULE(_dtensor, m) {
  m.doc() = "The compiled core of the dtensor package (import dtensor, not this).";
  dt::python::bind_errors(m);
  dt::python::bind_dtensor(m);
  dt::python::bind_model(m);
  dt::python::bind_world(m);
  m.def("_bytes_copied", [] { return dt::python::bytes_copied().load(); },
        "Bytes the module copied converting arrays since it was loaded (0 for contiguous arrays of a "
        "supported dtype in, and every result out).");
}
