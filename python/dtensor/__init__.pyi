"""dtensor: turn a single-device tensor program into a distributed one, run and train it.

The API follows PyTorch's DTensor (torch.distributed.tensor): DeviceMesh, Shard / Replicate /
Partial placements, distribute_tensor and DTensor with to_local, redistribute and full_tensor;
plus models: load, import_onnx, from_torch, Model.run / compile / train / save_weights.
Arrays in and out are numpy arrays (no copies for contiguous arrays of a supported dtype).
See docs/python.md.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from . import _dtensor
from ._dtensor import (  # noqa: F401  (re-exported)
    CommError,
    DimError,
    DTypeError,
    Error,
    InternalError,
    IoError,
    ParseError,
    RedistributePlan,
    ShapeError,
    ValueError,
)

_builtin_ValueError = __builtins__["ValueError"] if isinstance(__builtins__, dict) else __builtins__.ValueError

__all__ = [
    "DeviceMesh", "Placement", "Shard", "Replicate", "Partial", "DTensor", "distribute_tensor",
    "plan_redistribute", "Error", "ShapeError", "DimError", "DTypeError", "ValueError", "ParseError",
    "IoError", "CommError", "InternalError", "RedistributePlan",
]


# ---------------------------------------------------------------------------------------------
# Placements


class Placement:
    """How a tensor is laid out along one mesh dim: Shard(dim), Replicate() or Partial(op)."""

    __slots__ = ()

    def is_shard(self, dim: int | None = None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self) -> bool:
        return False


class Shard(Placement):
    """Sharded on tensor dim `dim` (split like torch.chunk: the last ranks may hold less)."""

    __slots__ = ("dim",)

    def __init__(self, dim: int):
        if not isinstance(dim, int):
            raise TypeError(f"Shard(dim): dim must be an int, got {type(dim).__name__}")
        self.dim = dim

    def is_shard(self, dim: int | None = None) -> bool:
        return dim is None or dim == self.dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("S", self.dim))

    def __repr__(self):
        return f"Shard(dim={self.dim})"

    def _text(self) -> str:
        return f"S({self.dim})"


class Replicate(Placement):
    """Every rank of the mesh dim holds the whole tensor."""

    __slots__ = ()

    def is_replicate(self) -> bool:
        return True

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("R")

    def __repr__(self):
        return "Replicate()"

    def _text(self) -> str:
        return "R"


class Partial(Placement):
    """Each rank holds a partial value; the tensor is their reduction with `reduce_op`
    ("sum", "avg", "max" or "min")."""

    __slots__ = ("reduce_op",)
    _OPS = ("sum", "avg", "max", "min")

    def __init__(self, reduce_op: str = "sum"):
        if reduce_op not in self._OPS:
            raise _builtin_ValueError(f"Partial: reduce_op must be one of {', '.join(self._OPS)}, got {reduce_op!r}")
        self.reduce_op = reduce_op

    def is_partial(self) -> bool:
        return True

    def __eq__(self, other):
        return isinstance(other, Partial) and other.reduce_op == self.reduce_op

    def __hash__(self):
        return hash(("P", self.reduce_op))

    def __repr__(self):
        return f"Partial({self.reduce_op})"

    def _text(self) -> str:
        return f"P({self.reduce_op})"


def _placement_from_text(text: str) -> Placement:
    if text == "R":
        return Replicate()
    if text.startswith("S("):
        return Shard(int(text[2:-1]))
    if text.startswith("P("):
        return Partial(text[2:-1])
    raise InternalError(f"unexpected placement text {text!r}")  # SS(d) is not made from Python


def _placements_text(placements: Sequence[Placement] | str, mesh: "DeviceMesh") -> str:
    """The library's text form ("S(0),R"); a str is passed through (the CLI's syntax)."""
    if isinstance(placements, str):
        return placements
    if isinstance(placements, Placement):
        placements = [placements]
    items = list(placements)
    for i, p in enumerate(items):
        if not isinstance(p, Placement):
            raise TypeError(f"placements[{i}]: expected Shard, Replicate or Partial, got {type(p).__name__}")
    if len(items) != mesh.ndim:
        raise ValueError(f"{len(items)} placements for a mesh of {mesh.ndim} dims {mesh.shape}")
    return ",".join(p._text() for p in items)


# ---------------------------------------------------------------------------------------------
# DeviceMesh


class DeviceMesh:
    """An n-d array of ranks: DeviceMesh((2, 2), ("dp", "tp")).

    The ranks are in-process threads (the threads backend), numbered 0..size-1 row-major.
    The first argument may also be "cpu" as in PyTorch: DeviceMesh("cpu", (2, 2), mesh_dim_names=...).
    """

    def __init__(self, shape, mesh_dim_names: Sequence[str] | None = None, *args, **kwargs):
        if isinstance(shape, str):  # PyTorch's DeviceMesh(device_type, mesh, ...)
            if not args and "mesh" not in kwargs and mesh_dim_names is None:
                raise TypeError("DeviceMesh(device_type, mesh): the mesh shape is missing")
            shape, mesh_dim_names = (mesh_dim_names, args[0] if args else kwargs.get("mesh_dim_names")) \
                if "mesh" not in kwargs else (kwargs["mesh"], mesh_dim_names)
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(shape)
        if not shape or not all(isinstance(s, int) for s in shape):
            raise TypeError(f"DeviceMesh: shape must be a tuple of ints, got {shape!r}")
        if mesh_dim_names is not None:
            mesh_dim_names = tuple(mesh_dim_names)
            if len(mesh_dim_names) != len(shape):
                raise ValueError(f"DeviceMesh: {len(mesh_dim_names)} mesh_dim_names for {len(shape)} mesh dims")
        self._shape = shape
        self.mesh_dim_names = mesh_dim_names
        _dtensor._check_mesh(list(shape))

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def size(self, mesh_dim: int | None = None) -> int:
        """The number of ranks (of one mesh dim when given)."""
        if mesh_dim is not None:
            return self._shape[mesh_dim]
        n = 1
        for s in self._shape:
            n *= s
        return n

    def _text(self) -> str:
        return "x".join(str(s) for s in self._shape)

    def __eq__(self, other):
        return isinstance(other, DeviceMesh) and other._shape == self._shape and \
            other.mesh_dim_names == self.mesh_dim_names

    def __hash__(self):
        return hash((self._shape, self.mesh_dim_names))

    def __repr__(self):
        if self.mesh_dim_names is None:
            return f"DeviceMesh({self._shape})"
        return f"DeviceMesh({self._shape}, mesh_dim_names={self.mesh_dim_names})"


# ---------------------------------------------------------------------------------------------
# DTensor


class DTensor:
    """A tensor laid out over a DeviceMesh: every rank's local shard plus its placements.

    Made by distribute_tensor or redistribute. On the threads backend this object holds every
    rank's shard: to_local(rank=r) returns rank r's.
    """

    __slots__ = ("_impl", "_mesh")

    def __init__(self, impl, mesh: DeviceMesh):
        self._impl = impl
        self._mesh = mesh

    @property
    def placements(self) -> tuple[Placement, ...]:
        return tuple(_placement_from_text(t) for t in _split_placements(self._impl.placements))

    @property
    def shape(self) -> tuple[int, ...]:
        return self._impl.shape

    @property
    def dtype(self):
        import numpy as np
        return np.dtype(self._impl.dtype)

    @property
    def device_mesh(self) -> DeviceMesh:
        return self._mesh

    @property
    def ndim(self) -> int:
        return len(self._impl.shape)

    def to_local(self, rank: int = 0):
        """Rank `rank`'s local shard as a numpy array (a view of the library's buffer, no copy)."""
        return self._impl.local(rank)

    def redistribute(self, device_mesh: DeviceMesh | None = None, placements=None) -> "DTensor":
        """The same tensor laid out as `placements`: runs the planned collectives on every rank."""
        if device_mesh is not None and device_mesh.shape != self._mesh.shape:
            raise ValueError(f"redistribute to another mesh ({device_mesh} from {self._mesh}) is not supported")
        if placements is None:
            raise TypeError("redistribute: placements is required")
        return DTensor(self._impl.redistribute(_placements_text(placements, self._mesh)), self._mesh)

    def full_tensor(self):
        """The global tensor as a numpy array (gathered from every rank's shard)."""
        return self._impl.full_tensor()

    def __repr__(self):
        local = self._impl.local_shape(0)
        return (f"DTensor(local_shape={local}, shape={self.shape}, dtype={self._impl.dtype}, "
                f"placements={self.placements}, device_mesh={self._mesh})")


def _split_placements(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur:
        out.append(cur)
    return out


def distribute_tensor(tensor, device_mesh: DeviceMesh, placements: Sequence[Placement] | None = None) -> DTensor:
    """Cuts `tensor` (a numpy array, the same on every rank) into `device_mesh`'s shards.

    placements: one per mesh dim (default: all Replicate()). Partial("sum") keeps the value on
    index 0 of that mesh dim and zeros elsewhere; Partial("avg"/"max"/"min") keeps it everywhere.
    A shard of a contiguous array is a view of it (no copy).
    """
    if not isinstance(device_mesh, DeviceMesh):
        raise TypeError(f"distribute_tensor: device_mesh must be a DeviceMesh, got {type(device_mesh).__name__}")
    if placements is None:
        placements = [Replicate()] * device_mesh.ndim
    text = _placements_text(placements, device_mesh)
    return DTensor(_dtensor._DTensor.distribute(tensor, list(device_mesh.shape), text), device_mesh)


def plan_redistribute(mesh: DeviceMesh | Sequence[int] | str, shape: Sequence[int], dtype: str,
                      src: Sequence[Placement] | str, dst: Sequence[Placement] | str) -> RedistributePlan:
    """The cheapest redistribution of a tensor of `shape` from `src` to `dst` placements
    (as `dtensor plan`): .steps, .total_bytes, .total_time_us, .collectives; str() is the table."""
    if isinstance(mesh, str):
        mesh = DeviceMesh(tuple(int(s) for s in mesh.split("x")))
    elif not isinstance(mesh, DeviceMesh):
        mesh = DeviceMesh(tuple(mesh))
    import numpy as np
    dtype_text = dtype if isinstance(dtype, str) else _dtype_text(np.dtype(dtype))
    return _dtensor._plan_redistribute(list(mesh.shape), list(shape), dtype_text,
                                       _placements_text(src, mesh), _placements_text(dst, mesh))


def _dtype_text(dtype) -> str:
    return {"float32": "f32", "float64": "f64", "float16": "f16", "int64": "i64", "int32": "i32",
            "bool": "bool", "uint16": "bf16"}.get(str(dtype), str(dtype))
