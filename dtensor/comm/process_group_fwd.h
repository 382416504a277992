// Declarations of the collective interface's types (process_group.h), for headers that pass them
// along without calling them (the op registry's kernel arguments).
#pragma once

#include <memory>

namespace dt {

class ProcessGroup;
class Work;
using WorkPtr = std::shared_ptr<Work>;

}  // namespace dt
