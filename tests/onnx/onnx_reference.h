// Where the ONNX tests find PyTorch's exports (tests/reference/onnx; DTENSOR_REFERENCE_DIR is set
// by tests/CMakeLists.txt). One definition for every onnx_import_test source.
#pragma once

#include <string>

namespace dt::io {

inline const std::string kReference = std::string(DTENSOR_REFERENCE_DIR) + "/onnx";

}  // namespace dt::io
