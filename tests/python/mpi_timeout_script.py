"""Run under `mpirun -np 2 python3 mpi_timeout_script.py OUT.json` by test_mpi.py: rank 1 skips
the gather of full_tensor(); rank 0 waits in it until init_process_group's timeout and writes what
it raised to OUT.json. Rank 1 stays alive past the timeout (so the failure is a stall, not a dead
peer) and then exits."""
import json
import sys
import time

import numpy as np

import dtensor as dt

TIMEOUT_S = 2.0
out_path = sys.argv[1]
dt.init_process_group("mpi", timeout=TIMEOUT_S)
rank = dt.get_rank()
x = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
d = dt.distribute_tensor(x, dt.DeviceMesh((2,)), [dt.Shard(0)])
if rank == 1:
    time.sleep(TIMEOUT_S + 4)  # never joins the gather
    sys.exit(0)
result = {"timeout_s": TIMEOUT_S}
start = time.monotonic()
try:
    d.full_tensor()
    result["raised"] = None
except Exception as e:  # what a user's `except` sees
    result.update(raised=type(e).__name__, is_dt_error=isinstance(e, dt.Error),
                  is_runtime_error=isinstance(e, RuntimeError), is_comm_error=isinstance(e, dt.CommError),
                  sequence=getattr(e, "sequence", None), ranks=list(getattr(e, "ranks", []) or []),
                  message=str(e))
result["elapsed_s"] = time.monotonic() - start
with open(out_path, "w") as f:
    json.dump(result, f)
