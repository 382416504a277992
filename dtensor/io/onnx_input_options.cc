// Parsing the import options given as text (`--input-shape name=2x32`, `--input-dtype name=i64`).
#include <algorithm>
#include <cctype>

#include "dtensor/core/error.h"
#include "dtensor/io/onnx_import.h"

namespace dt::io {
namespace {

Shape parse_dims(const std::string& text, const std::string& what) {
  Shape s;
  if (text.empty()) return s;
  size_t at = 0;
  while (true) {
    size_t x = text.find('x', at);
    const std::string piece = text.substr(at, x == std::string::npos ? std::string::npos : x - at);
    if (piece.empty() || piece.size() > 12 || !std::all_of(piece.begin(), piece.end(), ::isdigit))
      DT_THROW(ValueError) << what << ": '" << text << "' is not a shape like 2x32 (positive sizes joined by 'x')";
    s.push_back(std::stoll(piece));
    if (x == std::string::npos) break;
    at = x + 1;
  }
  return s;
}

}  // namespace

std::pair<std::string, Shape> parse_input_shape(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    DT_THROW(ValueError) << "--input-shape '" << text << "' must be NAME=SHAPE, e.g. input_ids=2x32";
  return {text.substr(0, eq), parse_dims(text.substr(eq + 1), "--input-shape " + text.substr(0, eq))};
}

std::pair<std::string, DType> parse_input_dtype(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    DT_THROW(ValueError) << "--input-dtype '" << text << "' must be NAME=DTYPE, e.g. input_ids=i64";
  return {text.substr(0, eq), parse_dtype(text.substr(eq + 1))};
}
void add_input_shapes(OnnxImportOptions& options, const std::vector<std::string>& texts) {
  for (const std::string& t : texts) {
    auto [name, shape] = parse_input_shape(t);
    if (!options.input_shapes.emplace(name, shape).second)
      DT_THROW(ValueError) << "--input-shape gives input '" << name << "' twice";
  }
}

void add_input_dtypes(OnnxImportOptions& options, const std::vector<std::string>& texts) {
  for (const std::string& t : texts) {
    auto [name, dtype] = parse_input_dtype(t);
    if (!options.input_dtypes.emplace(name, dtype).second)
      DT_THROW(ValueError) << "--input-dtype gives input '" << name << "' twice";
  }
}

std::string import_summary(const OnnxImportSummary& s) {
  return "fused: " + std::to_string(s.fused.attention) + " attention, " + std::to_string(s.fused.rms_norm) +
         " rms_norm, " + std::to_string(s.fused.activation) + " activation; frozen constants: " + std::to_string(s.frozen) + "; parameters: " + std::to_string(s.parameters);
}

}  // namespace dt::io
