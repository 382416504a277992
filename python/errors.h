// The library's errors as Python exceptions (docs/python.md "Errors").
//
//   dtensor.Error(Exception)            every dt::Error; fields message, file, line, column
//     ShapeError, DimError, DTypeError, ValueError, ParseError   also builtins.ValueError
//     IoError                           also builtins.OSError
//     CommError                         also builtins.RuntimeError; fields sequence, ranks
//   dtensor.InternalError(RuntimeError) a bug in dtensor (dt::InternalError), not a bad input
//
// Any other C++ exception becomes RuntimeError: nothing escapes as a crash.
#pragma once

#include <pybind11/pybind11.h>

namespace dt::python {

// Creates the exception classes in `m` and registers the translator.
void bind_errors(pybind11::module_& m);

}  // namespace dt::python
