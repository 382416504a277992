"""Every exception type from a bad input: dtensor.Error subclasses that are also the matching
built-in (ValueError, OSError, RuntimeError), with the library's message and fields."""
import numpy as np
import pytest

import dtensor as dt

MLP_IR = """graph g {
  input %x : f32[2, 3]
  param %w : f32[4, 3]
  %y = linear(%x, %w) : f32[2, 4]
  return %y
}
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_hierarchy():
    for cls, builtin in [(dt.ShapeError, ValueError), (dt.DimError, ValueError), (dt.DTypeError, ValueError),
                         (dt.ValueError, ValueError), (dt.ParseError, ValueError), (dt.IoError, OSError),
                         (dt.CommError, RuntimeError)]:
        assert issubclass(cls, dt.Error) and issubclass(cls, builtin), cls
    assert issubclass(dt.InternalError, RuntimeError) and not issubclass(dt.InternalError, dt.Error)


def test_dim_error_from_a_shard_dim_out_of_range():
    with pytest.raises(dt.DimError, match="shard dim 2 out of range for tensor of rank 2") as e:
        dt.distribute_tensor(np.zeros((4, 4), np.float32), dt.DeviceMesh((2,)), [dt.Shard(2)])
    assert isinstance(e.value, ValueError)
    assert e.value.line is None and e.value.file is None


def test_mixed_and_prod_partials_are_placements_as_in_pytorch():
    # Mixed reduce ops on one tensor are reduced in a fixed order (last mesh dim first), and
    # P(prod) is a partial like the others: distributing and gathering gives the tensor back.
    x = np.arange(1, 17, dtype=np.float32).reshape(4, 4)
    mixed = dt.distribute_tensor(x, dt.DeviceMesh((2, 2)), [dt.Partial("sum"), dt.Partial("max")])
    assert np.array_equal(mixed.full_tensor(), x)
    prod = dt.distribute_tensor(x, dt.DeviceMesh((2,)), [dt.Partial("prod")])
    assert np.array_equal(prod.full_tensor(), x)


def test_value_error_from_a_bad_mesh_and_placements():
    with pytest.raises(dt.ValueError):
        dt.DeviceMesh((2, 0))
    with pytest.raises(ValueError, match="2 placements for a mesh of 1 dims"):
        dt.distribute_tensor(np.zeros(4, np.float32), dt.DeviceMesh((2,)), [dt.Shard(0), dt.Shard(0)])
    with pytest.raises(ValueError):
        dt.Partial("xor")
    with pytest.raises(dt.ValueError, match="rank 4 is not in the mesh"):
        dt.distribute_tensor(np.zeros(4, np.float32), dt.DeviceMesh((4,)), [dt.Shard(0)]).to_local(rank=4)
    # -1 is not "the default rank" (it once read rank 0's shard).
    with pytest.raises(dt.ValueError, match="rank -1 is not in the mesh"):
        dt.distribute_tensor(np.zeros(4, np.float32), dt.DeviceMesh((4,)), [dt.Shard(0)]).to_local(rank=-1)


def test_type_errors_name_the_argument():
    with pytest.raises(TypeError, match="tensor: dtype complex64 is not supported"):
        dt.distribute_tensor(np.zeros(4, np.complex64), dt.DeviceMesh((2,)), [dt.Shard(0)])
    with pytest.raises(TypeError, match="placements\\[0\\]"):
        dt.distribute_tensor(np.zeros(4, np.float32), dt.DeviceMesh((2,)), ["S(0)x"])


def test_parse_error_is_located(tmp_path):
    p = write(tmp_path, "bad.dt", "graph g {\n  input %x : f32[2, 3]\n  %y = relu(%x, : f32[2, 3]\n}\n")
    with pytest.raises(dt.ParseError) as e:
        dt.load(p)
    assert e.value.file == str(p) and e.value.line == 3 and e.value.column > 0
    assert str(e.value).startswith(f"{p}:3:")
    assert not e.value.message.startswith(str(p))


def test_shape_error_from_a_model_whose_shapes_do_not_agree(tmp_path):
    p = write(tmp_path, "shape.dt", MLP_IR.replace("param %w : f32[4, 3]", "param %w : f32[4, 5]"))
    with pytest.raises(dt.ShapeError) as e:
        dt.load(p, weights={"w": np.zeros((4, 5), np.float32)})
    assert e.value.line == 4


def test_dtype_error_from_a_model(tmp_path):
    p = write(tmp_path, "dtype.dt", "graph g {\n  input %x : i64[2]\n  %y = exp(%x) : i64[2]\n  return %y\n}\n")
    with pytest.raises(dt.DTypeError):
        dt.load(p)


def test_io_errors(tmp_path):
    with pytest.raises(dt.IoError) as e:
        dt.load(tmp_path / "missing.dt")
    assert isinstance(e.value, OSError)
    model = write(tmp_path, "m.dt", MLP_IR)
    with pytest.raises(dt.ShapeError, match="w"):  # a weight of the wrong shape: bad input, not I/O
        dt.load(model, weights={"w": np.zeros((3, 4), np.float32)})
    with pytest.raises(dt.IoError):
        dt.load(model, weights={})
    with pytest.raises(dt.IoError):
        dt.load(model, weights=str(tmp_path / "missing.safetensors"))
    m = dt.load(model, weights={"w": np.ones((4, 3), np.float32)})
    with pytest.raises(dt.ShapeError, match="x"):  # an input of the wrong shape
        m.run({"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(dt.ValueError, match="missing 'x'"):
        m.run({})
    with pytest.raises(dt.ValueError, match="has no input 'y'"):
        m.run({"x": np.zeros((2, 3), np.float32), "y": np.zeros(1, np.float32)})
    with pytest.raises(dt.IoError):
        m.run({"x": np.zeros((2, 3), np.float32)}, mesh=dt.DeviceMesh((2,)), plan=tmp_path / "no_plan.json")


def test_bad_plan_and_train_options(tmp_path):
    m = dt.load(write(tmp_path, "m.dt", MLP_IR), weights={"w": np.ones((4, 3), np.float32)})
    x = {"x": np.zeros((2, 3), np.float32)}
    with pytest.raises(dt.ValueError):
        m.run(x, mesh=dt.DeviceMesh((2,)), plan={"mesh_dims": ["tp"], "modules": [
            {"pattern": "nothing.*", "style": "colwise", "mesh_dim": "tp"}]})
    with pytest.raises(dt.ValueError):
        m.train(x, steps=0)
    with pytest.raises(dt.ValueError):
        m.train(x, optimizer="lion")
    # One without the other is refused, as the CLI's --mesh / --plan (it once ran every rank on the
    # whole model).
    with pytest.raises(dt.ValueError, match="mesh= needs plan="):
        m.run(x, mesh=dt.DeviceMesh((2,)))
    with pytest.raises(dt.ValueError, match="plan= needs mesh="):
        m.compile(plan={"mesh_dims": ["tp"], "modules": []})
    with pytest.raises(dt.ValueError, match="mesh= needs plan="):
        m.train(x, mesh=dt.DeviceMesh((2,)))
    # An array of the wrong shape or dtype is a ValueError (ShapeError / DTypeError), not an OSError.
    with pytest.raises(dt.ShapeError, match="has shape \\[3, 3\\] but the graph expects f32\\[2, 3\\]"):
        m.run({"x": np.zeros((3, 3), np.float32)})
    with pytest.raises(dt.DTypeError, match="has dtype f64 but the graph expects f32"):
        m.run({"x": np.zeros((2, 3), np.float64)})


def test_library_errors_carry_their_fields():
    with pytest.raises(dt.CommError) as e:
        dt._dtensor._raise_for_test("comm")
    assert isinstance(e.value, RuntimeError)
    assert e.value.sequence == 7 and e.value.ranks == (0, 1)
    with pytest.raises(dt.InternalError):
        dt._dtensor._raise_for_test("internal")
    with pytest.raises(RuntimeError):
        dt._dtensor._raise_for_test("std")
