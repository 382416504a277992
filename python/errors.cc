#include "python/errors.h"

#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "dtensor/core/error.h"

namespace dt::python {
namespace py = pybind11;
namespace {

// The classes, created once in bind_errors (module lifetime: never freed).
struct Classes {
  PyObject* error = nullptr;
  PyObject* shape = nullptr;
  PyObject* dim = nullptr;
  PyObject* dtype = nullptr;
  PyObject* value = nullptr;
  PyObject* parse = nullptr;
  PyObject* io = nullptr;
  PyObject* comm = nullptr;
  PyObject* internal = nullptr;
};
Classes classes;

PyObject* make_class(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  std::string qualified = std::string("dtensor.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));
  return cls;
}

template <typename E>
bool is(const Error& e) {
  return dynamic_cast<const E*>(&e) != nullptr;
}

// The Python class of a dtensor error: its subclass's, else dtensor.Error.
PyObject* class_of(const Error& e) {
  const std::pair<bool, PyObject*> kinds[] = {
      {is<CommError>(e), classes.comm},   {is<ShapeError>(e), classes.shape}, {is<DimError>(e), classes.dim},
      {is<DTypeError>(e), classes.dtype}, {is<ValueError>(e), classes.value}, {is<ParseError>(e), classes.parse},
      {is<IoError>(e), classes.io}};
  for (const auto& [match, cls] : kinds)
    if (match) return cls;
  return classes.error;
}

// Raises `cls(what)` with the error's fields as attributes.
void raise(PyObject* cls, const Error& e) {
  py::object exc = py::reinterpret_borrow<py::object>(cls)(py::str(e.what()));
  exc.attr("message") = py::str(e.message());
  exc.attr("file") = e.located() && e.line() > 0 ? py::object(py::str(e.file())) : py::none();
  exc.attr("line") = e.line() > 0 ? py::object(py::int_(e.line())) : py::none();
  exc.attr("column") = e.line() > 0 ? py::object(py::int_(e.column())) : py::none();
  if (auto* c = dynamic_cast<const CommError*>(&e)) {
    exc.attr("sequence") = c->sequence() >= 0 ? py::object(py::int_(c->sequence())) : py::none();
    exc.attr("ranks") = py::tuple(py::cast(c->ranks()));
  }
  PyErr_SetObject(cls, exc.ptr());
}

}  // namespace

void bind_errors(py::module_& m) {
  py::handle exception = PyExc_Exception, value_error = PyExc_ValueError, os_error = PyExc_OSError,
             runtime_error = PyExc_RuntimeError;
  classes.error = make_class(m, "Error", py::make_tuple(exception),
                             "A dtensor user error: bad input, file or collective. Fields: message (without "
                             "the location), file, line, column (None when not in a text).");
  py::handle base = classes.error;
  classes.shape = make_class(m, "ShapeError", py::make_tuple(base, value_error), "Shapes that do not agree.");
  classes.dim = make_class(m, "DimError", py::make_tuple(base, value_error), "A dim index out of range.");
  classes.dtype = make_class(m, "DTypeError", py::make_tuple(base, value_error), "A dtype that is not supported.");
  classes.value = make_class(m, "ValueError", py::make_tuple(base, value_error),
                             "A bad argument value (placement text, mesh, option).");
  classes.parse = make_class(m, "ParseError", py::make_tuple(base, value_error),
                             "A text (IR, plan) that does not parse, or a graph that does not verify.");
  classes.io = make_class(m, "IoError", py::make_tuple(base, os_error), "A file that cannot be read or is malformed.");
  classes.comm = make_class(m, "CommError", py::make_tuple(base, runtime_error),
                            "A collective that failed or timed out. Fields: sequence (of the collective on "
                            "its group, None when not one collective), ranks (of its group).");
  classes.internal = make_class(m, "InternalError", py::make_tuple(runtime_error),
                                "A bug in dtensor (a broken internal invariant), not a problem with the input.");

  // For the tests of the translation: throws one C++ error of each kind the translator handles.
  m.def("_raise_for_test", [](const std::string& kind) {
    if (kind == "comm") throw CommError("all_reduce #7 on group [0, 1] timed out", 7, {0, 1});
    if (kind == "internal") {
      DT_CHECK(false) << "for the test";
    }
    throw std::runtime_error("a C++ exception that is not dtensor's");
  });

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(class_of(e), e);
    } catch (const InternalError& e) {
      PyErr_SetString(classes.internal, e.what());
    }
    // Anything else falls through to pybind11's own translators (RuntimeError for std::exception).
  });
}

}  // namespace dt::python
