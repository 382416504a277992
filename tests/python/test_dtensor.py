"""DeviceMesh, placements, distribute_tensor, DTensor and plan_redistribute against numpy."""
import itertools
import random

import numpy as np
import pytest

import dtensor as dt

MESHES = [(4,), (3,), (2, 2), (2, 3)]
SHAPES = [(7, 5), (10, 3, 2), (3,)]


def chunk(start, length, n, i):
    """torch.chunk's piece i of n of [start, start + length)."""
    c = -(-length // n) if length else 0
    lo = min(i * c, length)
    hi = min((i + 1) * c, length)
    return start + lo, max(0, hi - lo)


def coords(mesh_shape):
    return list(itertools.product(*[range(s) for s in mesh_shape]))


def local_reference(full, mesh_shape, placements, coord):
    """What rank `coord` holds (dtensor_spec.h: shards nested in mesh-dim order; P(sum) keeps the
    value on index 0 of its mesh dim, zeros elsewhere)."""
    extent = [(0, s) for s in full.shape]
    zero = False
    for m, p in enumerate(placements):
        if isinstance(p, dt.Shard):
            d = p.dim % full.ndim
            extent[d] = chunk(*extent[d], mesh_shape[m], coord[m])
        elif isinstance(p, dt.Partial) and p.reduce_op == "sum" and coord[m] != 0:
            zero = True
    out = full[tuple(slice(s, s + n) for s, n in extent)]
    return np.zeros_like(out) if zero else out


def random_array(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(-8, 9, size=shape).astype(dtype)  # small integers: sums are exact


def all_placements(ndim_tensor, with_partial=True):
    ps = [dt.Replicate()] + [dt.Shard(d) for d in range(ndim_tensor)]
    if with_partial:
        ps += [dt.Partial("sum"), dt.Partial("max")]
    return ps


@pytest.mark.parametrize("mesh_shape", MESHES)
@pytest.mark.parametrize("shape", SHAPES)
def test_distribute_matches_numpy_chunks(mesh_shape, shape):
    mesh = dt.DeviceMesh(mesh_shape)
    x = random_array(shape, np.float32, 1)
    rng = random.Random(hash((mesh_shape, shape)) & 0xFFFF)
    choices = all_placements(len(shape))
    for _ in range(4):
        placements = [rng.choice(choices) for _ in mesh_shape]
        ops = {p.reduce_op for p in placements if isinstance(p, dt.Partial)}
        if len(ops) > 1:
            continue  # sum and max do not commute: refused (test_errors)
        d = dt.distribute_tensor(x, mesh, placements)
        assert d.placements == tuple(placements)
        assert d.shape == shape
        assert d.dtype == np.float32
        assert d.device_mesh is mesh
        for r, c in enumerate(coords(mesh_shape)):
            np.testing.assert_array_equal(d.to_local(rank=r), local_reference(x, mesh_shape, placements, c))
        np.testing.assert_array_equal(d.full_tensor(), x)


def test_to_local_is_a_view_of_the_library_shard():
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    d = dt.distribute_tensor(x, dt.DeviceMesh((2,)), [dt.Shard(0)])
    a, b = d.to_local(rank=1), d.to_local(rank=1)
    assert np.shares_memory(a, b) and not a.flags["OWNDATA"]
    # The shard is the library's (distribute_tensor cuts its own, as PyTorch's does): the input
    # can change without changing it.
    x[3:] = -1
    np.testing.assert_array_equal(a, np.arange(12, 24, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.float16])
def test_dtypes_round_trip(dtype):
    x = random_array((5, 4), dtype, 2)
    d = dt.distribute_tensor(x, dt.DeviceMesh((2, 2)), [dt.Shard(1), dt.Shard(0)])
    assert d.dtype == np.dtype(dtype)
    e = d.redistribute(placements=[dt.Replicate(), dt.Shard(1)])
    out = e.full_tensor()
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, x)


def test_bf16_arrives_as_uint16_bits():
    bits = np.array([0x3F80, 0x4000, 0xBF80, 0x0000, 0x4040], dtype=np.uint16)  # 1, 2, -1, 0, 3 in bf16
    d = dt.distribute_tensor(bits, dt.DeviceMesh((2,)), [dt.Shard(0)])
    assert d.dtype == np.uint16
    np.testing.assert_array_equal(d.redistribute(placements=[dt.Replicate()]).full_tensor(), bits)


def test_non_contiguous_input_is_copied_once():
    x = random_array((6, 8), np.float32, 3)[:, ::2]
    before = dt._dtensor._bytes_copied()
    d = dt.distribute_tensor(x, dt.DeviceMesh((2,)), [dt.Shard(1)])
    assert dt._dtensor._bytes_copied() - before == x.nbytes
    np.testing.assert_array_equal(d.full_tensor(), x)


def test_contiguous_input_and_results_are_not_copied():
    x = random_array((64, 16), np.float32, 4)
    before = dt._dtensor._bytes_copied()
    d = dt.distribute_tensor(x, dt.DeviceMesh((2, 2)), [dt.Shard(0), dt.Shard(1)])
    full = d.redistribute(placements=[dt.Shard(1), dt.Replicate()]).full_tensor()
    assert dt._dtensor._bytes_copied() == before
    assert full.base is not None  # a view over the library's buffer, kept alive by a capsule
    np.testing.assert_array_equal(full, x)


def placement_matrix(ndim_mesh, ndim_tensor):
    singles = all_placements(ndim_tensor) + [dt.Partial("avg")]
    for combo in itertools.product(singles, repeat=ndim_mesh):
        ops = {p.reduce_op for p in combo if isinstance(p, dt.Partial)}
        # sum and avg commute; max only with itself (normalize_placements)
        if "max" in ops and len(ops) > 1:
            continue
        yield list(combo)


@pytest.mark.parametrize("mesh_shape,shape", [((4,), (9, 3)), ((2, 3), (7, 5)), ((2, 2), (5, 3, 3))])
def test_redistribute_sampled_matrix(mesh_shape, shape):
    """redistribute over a sample of every (src, dst) pair of the placement matrix (fixed seed):
    the shards are numpy's chunks of the target layout, and full_tensor gives the input back."""
    mesh = dt.DeviceMesh(mesh_shape)
    x = random_array(shape, np.float32, 5)
    matrix = list(placement_matrix(len(mesh_shape), len(shape)))
    pairs = [(s, t) for s in matrix for t in matrix]
    rng = random.Random(30)
    for src, dst in rng.sample(pairs, min(40, len(pairs))):
        d = dt.distribute_tensor(x, mesh, src)
        if any(isinstance(p, dt.Partial) and isinstance(q, dt.Partial) and p != q for p, q in zip(src, dst)):
            with pytest.raises(dt.ValueError, match="partial ops differ"):
                d.redistribute(placements=dst)
            continue
        e = d.redistribute(placements=dst)
        assert e.placements == tuple(dst)
        np.testing.assert_array_equal(e.full_tensor(), x, err_msg=f"{src} -> {dst}")
        if not any(isinstance(p, dt.Partial) for p in dst):
            for r, c in enumerate(coords(mesh_shape)):
                np.testing.assert_array_equal(e.to_local(rank=r), local_reference(x, mesh_shape, dst, c),
                                              err_msg=f"{src} -> {dst}, rank {r}")


def test_partial_sum_reduces_the_locals():
    x = random_array((4, 6), np.int64, 6)
    d = dt.distribute_tensor(x, dt.DeviceMesh((3,)), [dt.Partial("sum")])
    np.testing.assert_array_equal(sum(d.to_local(rank=r) for r in range(3)), x)
    np.testing.assert_array_equal(d.redistribute(placements=[dt.Shard(1)]).full_tensor(), x)


def test_plan_redistribute_is_the_cli_plan(cli):
    import json
    mesh = dt.DeviceMesh((2, 4))
    plan = dt.plan_redistribute(mesh, (1023, 517), "f32", [dt.Shard(0), dt.Shard(1)], [dt.Shard(1), dt.Shard(0)])
    ref = json.loads(cli("plan", "--mesh", "2x4", "--shape", "1023x517", "--dtype", "f32", "--from", "S(0),S(1)",
                         "--to", "S(1),S(0)", "--json"))
    assert plan.steps == ref["steps"]
    assert plan.total_bytes == ref["total_bytes"]
    assert plan.total_time_us == ref["total_time_us"]
    assert plan.collectives == ref["collectives"]
    assert "all_to_all" in str(plan) or plan.steps
    # The text form of the CLI is accepted too.
    same = dt.plan_redistribute("2x4", (1023, 517), "f32", "S(0),S(1)", "S(1),S(0)")
    assert same.steps == plan.steps


def test_reprs():
    mesh = dt.DeviceMesh((2, 2), ("dp", "tp"))
    assert repr(mesh) == "DeviceMesh((2, 2), mesh_dim_names=('dp', 'tp'))"
    assert repr(dt.Shard(0)) == "Shard(dim=0)"
    assert repr(dt.Replicate()) == "Replicate()"
    assert repr(dt.Partial("max")) == "Partial(max)"
    d = dt.distribute_tensor(np.zeros((5, 4), np.float32), mesh, [dt.Shard(0), dt.Replicate()])
    assert repr(d).startswith("DTensor(local_shape=(3, 4), shape=(5, 4), dtype=float32, "
                              "placements=(Shard(dim=0), Replicate())")
    assert dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")) == mesh
    assert dt.DeviceMesh("cpu", (4,)).shape == (4,)


def test_every_public_object_has_a_docstring():
    for name in dt.__all__:
        obj = getattr(dt, name)
        assert obj.__doc__, name
