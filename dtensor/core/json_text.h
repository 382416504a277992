// Parsing a user's JSON file (a plan, a machine file): one ValueError naming the file for text
// that is not JSON, a NUL byte included (nlohmann's parser would stop there and accept what
// follows). Header-only: its readers link nlohmann_json themselves.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "dtensor/core/error.h"

namespace dt {

inline nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  if (size_t nul = text.find('\0'); nul != std::string::npos)
    DT_THROW(ValueError) << source << ": not valid json: a NUL byte at offset " << nul;
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    DT_THROW(ValueError) << source << ": not valid json: " << e.what();
  }
}

}  // namespace dt
