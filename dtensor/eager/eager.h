// The eager DTensor API in one include: DTensor (distribute_tensor, from_local, redistribute,
// full_tensor), eager ops dispatched through the sharding rules (dt::eager::linear, ...) and
// CommTensor's asynchronous collectives (dt::eager::all_reduce_, ...).
#pragma once

#include "dtensor/eager/comm_tensor.h"
#include "dtensor/eager/dtensor.h"
#include "dtensor/eager/eager_ops.h"
