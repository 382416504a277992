#include "dtensor/kernels/kernel_path.h"

#include <cstdlib>
#include <string_view>

#include "dtensor/core/error.h"

namespace dt {

bool KernelPathSwitch::from_environment() const {
  if (const char* env = spec_.env ? std::getenv(spec_.env) : nullptr) {
    const std::string_view v(env);
    if (v == spec_.portable) return false;
    if (v != spec_.fast)
      DT_THROW(ValueError) << spec_.env << " must be " << spec_.fast << " or " << spec_.portable << ", got '" << v
                           << "'";
    if (!spec_.supported())
      DT_THROW(ValueError) << spec_.env << "=" << spec_.fast << " needs " << spec_.needs
                           << ", which this CPU does not have";
    return true;
  }
  return spec_.supported() && spec_.prefer_fast();
}

bool KernelPathSwitch::fast() const {
  int chosen = chosen_.load(std::memory_order_relaxed);
  if (chosen < 0) {
    chosen = from_environment() ? 1 : 0;
    chosen_.store(chosen, std::memory_order_relaxed);
  }
  return chosen == 1;
}

void KernelPathSwitch::set(bool fast) {
  if (fast && !spec_.supported())
    DT_THROW(ValueError) << "the " << spec_.fast << " path" << (spec_.env ? " of " : "") << (spec_.env ? spec_.env : "")
                         << " needs " << spec_.needs << ", which this CPU does not have";
  chosen_.store(fast ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace dt
