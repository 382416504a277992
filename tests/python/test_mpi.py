"""Under `mpirun -np 4`: init_process_group("mpi"), distribute, redistribute, full_tensor, run and
train, one rank per process, give what the in-process ranks give (mpi_script.py)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import dtensor as dt


def test_mpirun_four_processes(cli, source_dir, tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (Open MPI)")
    with pytest.raises(dt.ValueError, match="mpirun"):
        dt.init_process_group("mpi")  # this process was not started by mpirun
    cli("example", "mlp", "-o", tmp_path / "mlp.dt")
    cli("example", "mlp", "--loss", "-o", tmp_path / "mlp_loss.dt", "--weights", tmp_path / "w.safetensors",
        "--inputs", tmp_path / "d.safetensors")  # the same seeded weights; data with `target`
    shutil.copy(source_dir / "examples" / "mlp_tp.json", tmp_path / "mlp_tp.json")
    out = tmp_path / "out.json"
    p = subprocess.run(["timeout", "300", mpirun, "--oversubscribe", "--allow-run-as-root", "-np", "4",
                        sys.executable, os.path.join(os.path.dirname(__file__), "mpi_script.py"), str(tmp_path),
                        str(out)], capture_output=True, text=True, env=dict(os.environ))
    assert p.returncode == 0, p.stdout + p.stderr
    got = json.loads(out.read_text())
    assert got["world_size"] == 4
    assert got["local_shapes_ok"] and got["full_equal"] and got["other_rank_refused"]
    # The same calls on in-process ranks.
    m = dt.load(tmp_path / "mlp.dt", weights=tmp_path / "w.safetensors")
    data = dt.load_safetensors(tmp_path / "d.safetensors")
    ref = m.run({"input": data["input"]}, mesh=dt.DeviceMesh((4,)), plan=tmp_path / "mlp_tp.json", backend="threads")
    np.testing.assert_array_equal(np.array(got["output"], dtype=np.float32), ref[m.outputs[0]])
    t = dt.load(tmp_path / "mlp_loss.dt", weights=tmp_path / "w.safetensors")
    r = t.train(data, steps=2, mesh=dt.DeviceMesh((4,)), plan=tmp_path / "mlp_tp.json", backend="threads")
    np.testing.assert_allclose(got["losses"], r.losses, rtol=1e-6)


def test_mpirun_collective_timeout_raises(tmp_path):
    """A rank that skips a collective: under `mpirun -np 2` the rank waiting in it raises
    dt.CommError (a dt.Error and a RuntimeError) naming the group and the collective's sequence
    number once init_process_group's timeout passes, and the job ends (no hang)."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (Open MPI)")
    out = tmp_path / "out.json"
    p = subprocess.run(["timeout", "120", mpirun, "--oversubscribe", "--allow-run-as-root", "-np", "2",
                        sys.executable, os.path.join(os.path.dirname(__file__), "mpi_timeout_script.py"), str(out)],
                       capture_output=True, text=True, env=dict(os.environ))
    assert p.returncode != 124, "mpirun hung\n" + p.stdout + p.stderr
    assert out.exists(), p.stdout + p.stderr
    got = json.loads(out.read_text())
    assert got["raised"] == "CommError", got
    assert got["is_dt_error"] and got["is_runtime_error"] and got["is_comm_error"], got
    assert got["ranks"] == [0, 1], got
    assert isinstance(got["sequence"], int) and got["sequence"] >= 1, got
    assert f"collective #{got['sequence']} on group [0, 1] timed out after 2000 ms on rank 0" in got["message"], got
    # It waited the timeout, not the default 60 s (loose: the machine may be busy).
    assert got["timeout_s"] <= got["elapsed_s"] < 30, got
