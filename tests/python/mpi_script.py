"""Run under `mpirun -np 4 python3 mpi_script.py MODEL_DIR OUT.json` by test_mpi.py: one rank per
process after init_process_group("mpi"); rank 0 writes what every call gave to OUT.json."""
import json
import sys

import numpy as np

import dtensor as dt

model_dir, out_path = sys.argv[1], sys.argv[2]
dt.init_process_group("mpi")
rank, world = dt.get_rank(), dt.get_world_size()
result = {"world_size": world}

# distribute keeps only this rank's shard; redistribute runs the collectives; full_tensor gathers.
x = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
mesh = dt.DeviceMesh((2, 2), ("dp", "tp"))
d = dt.distribute_tensor(x, mesh, [dt.Shard(0), dt.Shard(1)])
local = d.to_local()
e = d.redistribute(placements=[dt.Shard(1), dt.Replicate()])
full = e.full_tensor()
result["local_shapes_ok"] = local.shape == d._impl.local_shape(None)
result["full_equal"] = bool(np.array_equal(full, x))
try:
    d.to_local(rank=(rank + 1) % world)
    result["other_rank_refused"] = False
except dt.ValueError:
    result["other_rank_refused"] = True

# run and train on the mpi backend (the default under mpirun).
m = dt.load(f"{model_dir}/mlp.dt", weights=f"{model_dir}/w.safetensors")
data = dt.load_safetensors(f"{model_dir}/d.safetensors")
out = m.run({"input": data["input"]}, mesh=dt.DeviceMesh((4,)), plan=f"{model_dir}/mlp_tp.json")
t = dt.load(f"{model_dir}/mlp_loss.dt", weights=f"{model_dir}/w.safetensors")
r = t.train(data, steps=2, mesh=dt.DeviceMesh((4,)), plan=f"{model_dir}/mlp_tp.json")
result["output"] = out[m.outputs[0]].tolist()
result["losses"] = r.losses
result["local_shard_rank"] = rank
if rank == 0:
    with open(out_path, "w") as f:
        json.dump(result, f)
