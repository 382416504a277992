"""Models through Python against the CLI: the reference models (tests/reference) run, compile and
train to the same numbers bitwise (the same library), and close to PyTorch's."""
import json

import numpy as np
import pytest

import dtensor as dt


@pytest.fixture(scope="module")
def ref(source_dir):
    return source_dir / "tests" / "reference"


@pytest.fixture(scope="module")
def examples(source_dir):
    return source_dir / "examples"


def data_inputs(model, path):
    """The tensors of a safetensors file that `model` takes as data inputs."""
    return {k: v for k, v in dt.load_safetensors(path).items() if k in model.inputs}


def assert_same(actual: dict, expected: dict):
    assert set(actual) == set(expected)
    for k in expected:
        assert actual[k].dtype == expected[k].dtype, k
        np.testing.assert_array_equal(actual[k], expected[k], err_msg=k)


CASES = [
    # model, mesh, plan
    ("mlp", None, None),
    ("mlp", (4,), "mlp_tp.json"),
    ("gpt", None, None),
    ("gpt", (4,), "gpt_tp.json"),
    ("gpt", (2, 2), "gpt_fsdp_tp.json"),
]


@pytest.mark.parametrize("name,mesh,plan", CASES)
def test_run_matches_the_cli_bitwise(name, mesh, plan, ref, examples, cli, tmp_path):
    model_file = examples / f"{name}.dt"
    weights, inputs = ref / name / "weights.safetensors", ref / name / "inputs.safetensors"
    m = dt.load(model_file, weights=weights)
    x = data_inputs(m, inputs)
    args = ["run", model_file, "--weights", weights, "--inputs", inputs, "--save-outputs", tmp_path / "o.safetensors"]
    if mesh:
        out = m.run(x, mesh=dt.DeviceMesh(mesh), plan=examples / plan)
        args += ["--mesh", "x".join(map(str, mesh)), "--plan", examples / plan]
    else:
        out = m.run(x)
    cli(*args)
    assert_same(out, dt.load_safetensors(tmp_path / "o.safetensors"))
    # And PyTorch's output, within the reference tolerance.
    expected = dt.load_safetensors(ref / name / "outputs.safetensors")["output"]
    np.testing.assert_allclose(out[m.outputs[0]], expected, rtol=1e-4, atol=1e-4)


def test_weights_as_a_dict_of_arrays(ref, examples):
    w = dt.load_safetensors(ref / "mlp" / "weights.safetensors")
    a = dt.load(examples / "mlp.dt", weights=ref / "mlp" / "weights.safetensors")
    b = dt.load(examples / "mlp.dt", weights=w)
    x = data_inputs(a, ref / "mlp" / "inputs.safetensors")
    assert_same(a.run(x), b.run(x))
    assert set(b.weights) == set(b.params)


def test_arrays_over_a_files_bytes_are_read_only(ref, examples):
    # Every tensor loaded from the file shares its bytes (and packed weights trust them unchanged):
    # writing one is numpy's ValueError, and a copy is writable.
    w = dt.load_safetensors(ref / "mlp" / "weights.safetensors")
    name = sorted(w)[0]
    assert not w[name].flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        w[name][...] = 0
    before = w[name].copy()
    c = w[name].copy()
    c[...] = 0
    assert not c.any() and before.any()
    assert np.array_equal(w[name], before)
    a = dt.load(examples / "mlp.dt", weights=ref / "mlp" / "weights.safetensors")
    assert not a.weights[name].flags.writeable


def test_plan_auto_matches_one_device(ref, examples):
    """plan="auto" searches a plan for the mesh (as --plan auto) and runs it."""
    m = dt.load(examples / "gpt.dt", weights=ref / "gpt" / "weights.safetensors")
    x = data_inputs(m, ref / "gpt" / "inputs.safetensors")
    one = m.run(x)
    four = m.run(x, mesh=dt.DeviceMesh((4,)), plan="auto")
    for name, want in one.items():
        np.testing.assert_allclose(four[name], want, rtol=1e-4, atol=1e-4)
    report = m.compile(mesh=dt.DeviceMesh((4,)), plan="auto").report()
    assert sum(r["bytes_sent"] for r in report["ranks"]) > 0, "the auto plan shards nothing on 4 ranks"
    with pytest.raises(ValueError, match="needs a mesh"):
        m.run(x, plan="auto")


def test_plan_auto_under_a_memory_limit_compiles_the_searched_programs(ref, examples):
    """plan="auto" with max_memory_per_rank: the job runs its passes with the memory budget the
    search estimated the plan under (as --plan auto does), so the compiled programs' estimate stays
    under the limit. At this limit the passes' default budget prefetches past it (902,912 bytes)."""
    m = dt.load(examples / "gpt.dt", weights=ref / "gpt" / "weights.safetensors")
    x = data_inputs(m, ref / "gpt" / "inputs.safetensors")
    mesh, limit = dt.DeviceMesh((2, 2)), 900_000
    report = m.compile(mesh=mesh, plan="auto", max_memory_per_rank=limit).report()
    assert 0 < report["estimated_peak_bytes"] <= limit
    unlimited = m.compile(mesh=mesh, plan="auto").report()
    assert unlimited["estimated_peak_bytes"] > limit, "the limit must constrain the plan for this test to mean anything"
    out = m.run(x, mesh=mesh, plan="auto", max_memory_per_rank=limit)
    for name, want in m.run(x).items():
        np.testing.assert_allclose(out[name], want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="smallest per-rank memory found is"):
        m.compile(mesh=mesh, plan="auto", max_memory_per_rank=1000)
    with pytest.raises(ValueError, match='applies to plan="auto" only'):
        m.compile(mesh=mesh, plan=examples / "gpt_fsdp_tp.json", max_memory_per_rank=limit)
    with pytest.raises(ValueError, match="positive number of bytes"):
        m.compile(mesh=mesh, plan="auto", max_memory_per_rank="2GiB")


def test_plan_as_a_dict_and_repeated_runs(ref, examples):
    m = dt.load(examples / "mlp.dt", weights=ref / "mlp" / "weights.safetensors")
    x = data_inputs(m, ref / "mlp" / "inputs.safetensors")
    plan = json.loads((examples / "mlp_tp.json").read_text())
    mesh = dt.DeviceMesh((2,), ("tp",))
    first = m.run(x, mesh=mesh, plan=plan)
    for _ in range(3):
        assert_same(m.run(x, mesh=mesh, plan=plan), first)


def test_compile_report_and_programs_match_the_cli(ref, examples, cli):
    m = dt.load(examples / "gpt.dt", weights=ref / "gpt" / "weights.safetensors")
    c = m.compile(mesh=dt.DeviceMesh((2, 2), ("dp", "tp")), plan=examples / "gpt_fsdp_tp.json")
    report = c.report()
    expected = json.loads(cli("compile", examples / "gpt.dt", "--mesh", "2x2", "--plan", examples / "gpt_fsdp_tp.json",
                              "--report", "--json"))
    for timing in ("propagate_ms", "partition_ms"):  # wall times differ run to run
        report.pop(timing)
        expected.pop(timing)
    assert report == expected
    assert c.ranks == [0, 1, 2, 3]
    for r in (0, 3):
        program = cli("compile", examples / "gpt.dt", "--mesh", "2x2", "--plan", examples / "gpt_fsdp_tp.json",
                      "--rank", r)
        assert c.program(r) == program
    x = data_inputs(m, ref / "gpt" / "inputs.safetensors")
    assert_same(c.run(x), m.run(x, mesh=dt.DeviceMesh((2, 2)), plan=examples / "gpt_fsdp_tp.json"))


# Training: the mlp's cases and the gpt on 2x2 fsdp x tp.
TRAIN_CASES = [c for c in CASES if c[0] == "mlp" or c[1] == (2, 2)]


@pytest.mark.parametrize("name,mesh,plan", TRAIN_CASES)
def test_train_matches_the_cli_bitwise(name, mesh, plan, ref, examples, cli, tmp_path):
    model_file = tmp_path / f"{name}_loss.dt"
    cli("example", name, "--loss", "-o", model_file)
    weights, data = ref / name / "weights.safetensors", ref / name / "inputs.safetensors"
    m = dt.load(model_file, weights=weights)
    steps = 3
    args = ["train", model_file, "--weights", weights, "--data", data, "--steps", steps, "--json",
            "--save", tmp_path / "trained.safetensors"]
    kw = {}
    if mesh:
        kw = dict(mesh=dt.DeviceMesh(mesh), plan=examples / plan)
        args += ["--mesh", "x".join(map(str, mesh)), "--plan", examples / plan]
    r = m.train(data_inputs(m, data), steps=steps, lr=0.1, optimizer="sgd", **kw)
    expected = json.loads(cli(*args))
    assert r.losses == expected["losses"]
    trained = dt.load_safetensors(tmp_path / "trained.safetensors")
    assert_same(r.weights, trained)
    # The model keeps the trained parameters, and saves them.
    m.save_weights(tmp_path / "mine.safetensors")
    assert_same(dt.load_safetensors(tmp_path / "mine.safetensors"), {k: trained[k] for k in m.params})
    # PyTorch's SGD losses (5 steps at lr 0.1), within the reference tolerance.
    torch_losses = json.loads((ref / name / "config.json").read_text())["sgd_losses"][:steps]
    np.testing.assert_allclose(r.losses, torch_losses, rtol=1e-4)


def test_import_onnx_runs_like_pytorch(ref):
    m = dt.import_onnx(ref / "onnx" / "gpt.onnx", input_shapes={"input_ids": (2, 8)})
    io = dt.load_safetensors(ref / "onnx" / "gpt_io.safetensors")
    x = {k: io[k] for k in m.inputs}
    out = m.run(x)
    name = m.outputs[0]
    expected = io["output"]
    np.testing.assert_allclose(out[name], expected, rtol=1e-4, atol=1e-4)
    sharded = m.run(x, mesh=dt.DeviceMesh((2,)), plan=ref / "onnx" / "gpt_tp.json")
    np.testing.assert_allclose(sharded[name], out[name], rtol=1e-5, atol=1e-5)


def test_from_torch_runs_on_four_ranks():
    torch = pytest.importorskip("torch", reason="torch is not installed: from_torch needs it")

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    torch.manual_seed(0)
    module, x = MLP(), torch.randn(4, 16)
    m = dt.from_torch(module, (x,))
    assert set(m.params) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    plan = {"mesh_dims": ["tp"], "modules": [{"pattern": "fc1", "style": "colwise", "mesh_dim": "tp"},
                                             {"pattern": "fc2", "style": "rowwise", "mesh_dim": "tp"}]}
    out = m.run({"input": x.numpy()}, mesh=dt.DeviceMesh((4,)), plan=plan)
    expected = module(x).detach().numpy()
    np.testing.assert_allclose(out[m.outputs[0]], expected, rtol=1e-5, atol=1e-5)
    kinds = m.compile(mesh=dt.DeviceMesh((4,)), plan=plan).report()["ranks"][0]["collectives_per_kind"]
    assert sum(kinds.values()) == 1 and "all_reduce" in next(iter(kinds))  # Megatron: one all_reduce


def test_ctrl_c_stops_training_at_the_next_step(cli, tmp_path):
    """SIGINT while train runs (the GIL released) raises KeyboardInterrupt at the next step
    instead of running every step."""
    import os
    import signal
    import threading
    import time
    model_file = tmp_path / "tiny_loss.dt"
    weights, data = tmp_path / "w.safetensors", tmp_path / "d.safetensors"
    cli("example", "mlp", "--loss", "--hidden", 8, "--layers", 1, "--batch", 2, "-o", model_file,
        "--weights", weights, "--inputs", data)
    m = dt.load(model_file, weights=weights)
    d = dt.load_safetensors(data)
    steps_run = []
    started = threading.Event()

    def interrupt():
        started.wait()
        time.sleep(0.2)  # lands inside train (if it lands earlier, the same exception is raised)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt)
    t.start()
    # A first short train proves the model trains; the long one is interrupted.
    steps_run.append(len(m.train(d, steps=2).losses))
    with pytest.raises(KeyboardInterrupt):
        started.set()
        m.train(d, steps=10**7)
    t.join()
    assert steps_run == [2]
