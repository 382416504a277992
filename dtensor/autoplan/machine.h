// Machine files: the constants of the step-time estimate (estimate.h MachineModel) as JSON, written
// by `dtensor calibrate` (measured on this machine) or by hand (a described cluster), read by
// `--machine` (plan-search, --plan auto, dtensor plan). Format (docs/plans.md "Machine files"):
//
//   {"format": "dtensor-machine/1",
//    "gemm_gflops": 20, "mem_gbs": 5,              one rank's f32 GEMM rate; non-GEMM result bytes
//    "alpha_us": 10, "beta_gbs": 10,               α–β of any collective not listed below
//    "collectives": {"all_reduce": [{"group_size": 2, "alpha_us": 8, "beta_gbs": 6}, ...], ...},
//    "cluster": {"ranks_per_host": 8, "inter_host": {"alpha_us": 25, "beta_gbs": 12.5}},
//    "calibration": {...}}                         free-form: what calibrate measured, and how
//
// Every key but "format" is optional (an absent one keeps the documented default); an unknown key,
// a kind that is not a collective, a rate that is not a positive finite number or a group size
// below 2 is a ValueError naming the file and the key.
#pragma once

#include <string>

#include "dtensor/autoplan/estimate.h"

namespace dt::autoplan {

inline constexpr const char* kMachineFormat = "dtensor-machine/1";

MachineModel parse_machine(const std::string& text, const std::string& source);
MachineModel load_machine(const std::string& path);
// The JSON text load_machine reads back to an equal model; `calibration` (a JSON object's text,
// or "") is stored as it is.
std::string machine_json(const MachineModel& machine, const std::string& calibration = "");

}  // namespace dt::autoplan
