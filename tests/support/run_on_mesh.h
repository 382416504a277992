// Runs a test body on every rank of a mesh (threads backend), handing it the rank's mesh groups.
#pragma once

#include <memory>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/layout/mesh_groups.h"

namespace dt::test {

using MeshGroupsPtr = std::shared_ptr<const MeshGroups>;

template <typename F>
void run_on_mesh(const DeviceMesh& mesh, F body) {
  run_ranks(int(mesh.size()), [&](ProcessGroup& world) { body(MeshGroups::create(world, mesh)); });
}

}  // namespace dt::test
