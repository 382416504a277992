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

__all__ = [
    "DeviceMesh", "init_device_mesh", "Placement", "Shard", "Replicate", "Partial", "DTensor", "distribute_tensor",
    "plan_redistribute", "init_process_group", "get_rank", "get_world_size", "Error", "ShapeError", "DimError", "DTypeError", "ValueError", "ParseError",
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

    # A placement is its text ("S(0)", "R", "P(sum)"): equal texts are equal placements.
    def __eq__(self, other):
        return isinstance(other, Placement) and other._text() == self._text()

    def __hash__(self):
        return hash(self._text())


class Shard(Placement):
    """Sharded on tensor dim `dim` (split like torch.chunk: the last ranks may hold less)."""

    __slots__ = ("dim",)

    def __init__(self, dim: int):
        if not isinstance(dim, int):
            raise TypeError(f"Shard(dim): dim must be an int, got {type(dim).__name__}")
        self.dim = dim

    def is_shard(self, dim: int | None = None) -> bool:
        return dim is None or dim == self.dim

    def __repr__(self):
        return f"Shard(dim={self.dim})"

    def _text(self) -> str:
        return f"S({self.dim})"


class Replicate(Placement):
    """Every rank of the mesh dim holds the whole tensor."""

    __slots__ = ()

    def is_replicate(self) -> bool:
        return True

    def __repr__(self):
        return "Replicate()"

    def _text(self) -> str:
        return "R"


class Partial(Placement):
    """Each rank holds a partial value; the tensor is their reduction with `reduce_op`
    ("sum", "avg", "max", "min" or "prod")."""

    __slots__ = ("reduce_op",)
    _OPS = ("sum", "avg", "max", "min", "prod")

    def __init__(self, reduce_op: str = "sum"):
        if reduce_op not in self._OPS:
            raise ValueError(f"Partial: reduce_op must be one of {', '.join(self._OPS)}, got {reduce_op!r}")
        self.reduce_op = reduce_op

    def is_partial(self) -> bool:
        return True

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

    def __init__(self, *args, mesh_dim_names: Sequence[str] | None = None):
        # DeviceMesh(shape, names) or, as PyTorch spells it, DeviceMesh("cpu", shape, mesh_dim_names=...).
        if args and isinstance(args[0], str):
            args = args[1:]
        if not args or len(args) > 2:
            raise TypeError("DeviceMesh(shape, mesh_dim_names=None): expected the mesh shape, e.g. (2, 2)")
        shape = args[0]
        if len(args) == 2:
            mesh_dim_names = args[1]
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(shape)
        if not shape or not all(isinstance(s, int) for s in shape):
            raise TypeError(f"DeviceMesh: shape must be a tuple of ints, got {shape!r}")
        if mesh_dim_names is not None:
            mesh_dim_names = tuple(mesh_dim_names)
            if len(mesh_dim_names) != len(shape) or not all(isinstance(n, str) for n in mesh_dim_names):
                raise ValueError(f"DeviceMesh: mesh_dim_names {mesh_dim_names} must be {len(shape)} names")
        _dtensor._check_mesh(list(shape))
        self._shape = shape
        self.mesh_dim_names = mesh_dim_names

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


def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *, mesh_dim_names: Sequence[str] | None = None
                     ) -> DeviceMesh:
    """As torch.distributed.device_mesh.init_device_mesh: DeviceMesh(mesh_shape, mesh_dim_names)."""
    return DeviceMesh(tuple(mesh_shape), mesh_dim_names=mesh_dim_names)


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

    def to_local(self, rank: int | None = None):
        """Rank `rank`'s local shard as a numpy array (a view of the library's buffer, no copy).

        rank defaults to rank 0 on in-process ranks, and to this process's rank after
        init_process_group("mpi") (where other ranks' shards live in their processes)."""
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
        local = self._impl.local_shape(None)
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


def init_process_group(backend: str = "threads", timeout=None) -> None:
    """As torch.distributed.init_process_group: "mpi" under `mpirun -np N python3 SCRIPT` makes
    this process one rank of an N-rank world (kept until the process exits); then
    distribute_tensor keeps only this rank's shard, full_tensor gathers, and Model.run / train
    use the mpi backend. "threads" (the default without a call) keeps every rank in this process.

    timeout: seconds (a number or a datetime.timedelta, as PyTorch takes it; default 60 s) after
    which a collective that not every rank of its group joins raises CommError (a RuntimeError)
    on the ranks waiting in it, with the group's ranks and the collective's sequence number."""
    if timeout is not None and hasattr(timeout, "total_seconds"):
        timeout = timeout.total_seconds()
    _dtensor._init_process_group(backend, None if timeout is None else float(timeout))


def get_rank() -> int:
    """This process's rank in the world of init_process_group("mpi") (0 without one)."""
    return _dtensor._get_rank()


def get_world_size() -> int:
    """The number of processes of the world of init_process_group("mpi") (1 without one)."""
    return _dtensor._get_world_size()


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


# ---------------------------------------------------------------------------------------------
# Models


def _plan_args(plan) -> tuple[str, str]:
    """(plan JSON text, source name for messages) from a dict, a JSON path or None."""
    if plan is None:
        return "", ""
    if isinstance(plan, dict):
        import json
        return json.dumps(plan), "<plan dict>"
    import os
    if isinstance(plan, (str, os.PathLike)):
        path = os.fspath(plan)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), path
        except OSError as e:
            raise IoError(f"plan: cannot read {path}: {e.strerror}") from None
    raise TypeError(f"plan: expected a dict or a path to a plan JSON file, got {type(plan).__name__}")


def _mesh_arg(mesh) -> list[int] | None:
    if mesh is None:
        return None
    if isinstance(mesh, DeviceMesh):
        return list(mesh.shape)
    if isinstance(mesh, int):
        return [mesh]
    if isinstance(mesh, (tuple, list)):
        return list(DeviceMesh(tuple(mesh)).shape)
    raise TypeError(f"mesh: expected a DeviceMesh, got {type(mesh).__name__}")


class TrainResult:
    """What Model.train returns: losses (one per step, before its update), weights (the trained
    parameters and optimizer state, full tensors), step_ms, peak_bytes, and for sharded runs the
    placements of the state, bytes sent per step and the collectives of rank 0's step program."""

    def __init__(self, d: dict):
        self.losses: list[float] = d["losses"]
        self.weights: dict = d["state"]
        self.step_ms: list[float] = d["step_ms"]
        self.peak_bytes: int = d["peak_bytes"]
        self.placements: dict[str, str] = d["placements"]
        self.bytes_sent_per_step: list[int] = d["bytes_sent_per_step"]
        self.collectives: dict[str, int] = d["collectives"]
        self.first_grads: dict = d["first_grads"]

    def __repr__(self):
        return f"TrainResult(steps={len(self.losses)}, losses={self.losses})"


class CompiledModel:
    """A model compiled for a mesh and plan (Model.compile): every rank's program, the report of
    `dtensor compile --report --json`, and runs with the model's weights."""

    def __init__(self, impl, mesh: DeviceMesh | None):
        self._impl = impl
        self._mesh = mesh

    @property
    def ranks(self) -> list[int]:
        return self._impl.ranks

    @property
    def warnings(self) -> list[str]:
        return self._impl.warnings

    def program(self, rank: int = 0) -> str:
        """Rank `rank`'s program as IR text."""
        return self._impl.program(rank)

    def report(self) -> dict:
        """The compile report (as `dtensor compile --report --json` prints it)."""
        import json
        return json.loads(self._impl.report_json())

    def run(self, inputs: dict) -> dict:
        """Runs every rank; returns {output name: full ndarray}."""
        return self._impl.run(inputs)

    def __repr__(self):
        return f"CompiledModel(ranks={len(self.ranks)}, mesh={self._mesh})"


class Model:
    """A model: an IR graph and its weights (from load, import_onnx or from_torch)."""

    def __init__(self, impl):
        self._impl = impl

    @property
    def name(self) -> str:
        return self._impl.name

    @property
    def inputs(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """{data input name: (shape, numpy dtype name)}."""
        return self._impl.inputs

    @property
    def params(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """{parameter name: (shape, numpy dtype name)}."""
        return self._impl.params

    @property
    def outputs(self) -> list[str]:
        return self._impl.outputs

    @property
    def weights(self) -> dict:
        """{parameter name: ndarray} (views of the library's tensors)."""
        return self._impl.weights()

    @weights.setter
    def weights(self, value: dict):
        self._impl.set_weights(value)

    def ir(self) -> str:
        """The model as IR text (what `dtensor run` reads)."""
        return self._impl.ir()

    def run(self, inputs: dict, mesh: DeviceMesh | None = None, plan=None, *, passes: str = "default",
            backend: str | None = None, max_memory_per_rank: int | None = None) -> dict:
        """Runs the model; returns {output name: ndarray}.

        Without mesh and plan: one device. With them: every rank of the mesh (threads of this
        process; the mpi backend under mpirun), the outputs assembled from the ranks' shards.
        plan: a dict, the path of a plan JSON file (docs/plans.md), or "auto" (the plan the
        search finds, as `--plan auto`). max_memory_per_rank (plan="auto" only, bytes): the
        per-rank memory limit the plan must fit, as --max-memory-per-rank. The job is compiled
        on the first run for a (mesh, plan) and kept.
        """
        if mesh is None and plan is None and max_memory_per_rank is None:  # the common call: nothing to convert
            return self._impl.run(inputs, None, "", "", passes, backend or "", 0)
        pj, ps, budget = self._plan_args(plan, mesh, passes, max_memory_per_rank=max_memory_per_rank)
        return self._impl.run(inputs, _mesh_arg(mesh), pj, ps, passes, backend or "", budget)

    def _plan_args(self, plan, mesh, passes: str, train: bool = False, optimizer: str = "sgd",
                   max_memory_per_rank: int | None = None) -> tuple[str, str, int]:
        """_plan_args and the passes' memory budget (0: their default); plan="auto": the plan the
        search finds for this model on `mesh` and the budget it estimated the plan's memory under
        (the job must run its passes with it for its memory to be the one estimated)."""
        # As the CLI: a mesh without a plan would run every rank on the whole model, a plan without
        # a mesh on one rank; neither is what the caller meant.
        if mesh is not None and plan is None:
            raise ValueError('mesh= needs plan= (a plan dict, the path of a plan JSON file, or "auto")')
        if plan is not None and mesh is None and not (isinstance(plan, str) and plan == "auto"):
            raise ValueError("plan= needs mesh= (the device mesh it shards over, e.g. dt.DeviceMesh((4,)))")
        if isinstance(plan, str) and plan == "auto":
            if mesh is None:
                raise ValueError('plan="auto" needs a mesh to search a plan for')
            limit = 0
            if max_memory_per_rank is not None:
                if isinstance(max_memory_per_rank, bool) or not isinstance(max_memory_per_rank, int) \
                        or max_memory_per_rank < 1:
                    raise ValueError(f"max_memory_per_rank: expected a positive number of bytes, "
                                     f"got {max_memory_per_rank!r}")
                limit = max_memory_per_rank
            pj, budget = self._impl.auto_plan(_mesh_arg(mesh), train, optimizer, limit, passes)
            return pj, "auto", budget
        if max_memory_per_rank is not None:
            raise ValueError('max_memory_per_rank applies to plan="auto" only')
        return (*_plan_args(plan), 0)

    def compile(self, mesh: DeviceMesh | None = None, plan=None, *, passes: str = "default",
                backend: str | None = None, max_memory_per_rank: int | None = None) -> CompiledModel:
        """Compiles the model for `mesh` under `plan` (as `dtensor compile`)."""
        pj, ps, budget = self._plan_args(plan, mesh, passes, max_memory_per_rank=max_memory_per_rank)
        return CompiledModel(self._impl.compile(_mesh_arg(mesh), pj, ps, passes, backend or "", budget), mesh)

    def train(self, data: dict, steps: int = 1, lr: float | None = None, optimizer: str = "sgd", *,
              momentum: float = 0.0, weight_decay: float = 0.0, mesh: DeviceMesh | None = None, plan=None,
              passes: str = "default", backend: str | None = None, keep_first_grads: bool = False,
              max_memory_per_rank: int | None = None) -> TrainResult:
        """Trains for `steps` steps (as `dtensor train`); the model keeps the trained parameters.

        data: every data input of the model (`input`, `target`): one batch reused every step, or
        K batches stacked on a leading dim (step s uses batch s mod K). lr defaults to 0.1 for
        sgd and 1e-3 for adamw. With mesh and plan: sharded training on every rank. Ctrl-C
        stops it at the end of the current step (KeyboardInterrupt).
        """
        pj, ps, budget = self._plan_args(plan, mesh, passes, train=True, optimizer=optimizer,
                                         max_memory_per_rank=max_memory_per_rank)
        r = TrainResult(self._impl.train(data, steps, optimizer, lr, momentum, weight_decay, _mesh_arg(mesh), pj, ps,
                                         passes, backend or "", budget, keep_first_grads))
        params = self.params
        if all(k in r.weights for k in params):  # under mpi only rank 0 holds the trained tensors
            self._impl.set_weights({k: r.weights[k] for k in params})
        return r

    def save_weights(self, path) -> None:
        """Writes the parameters to a safetensors file."""
        import os
        self._impl.save_weights(os.fspath(path))

    def __repr__(self):
        return (f"Model(name={self.name!r}, inputs={self.inputs}, outputs={self.outputs}, "
                f"params={len(self.params)}, nodes={self._impl.num_nodes})")


def load(path, weights=None) -> Model:
    """Reads a model in the IR (`.dt`) with its weights: a .safetensors path, a sharded checkpoint
    directory or a dict {name: ndarray}."""
    import os
    if isinstance(weights, os.PathLike):
        weights = os.fspath(weights)
    return Model(_dtensor._Model.load(os.fspath(path), weights))


def import_onnx(path, input_shapes: dict | None = None, input_dtypes: dict | None = None, *,
                fuse: bool = True) -> Model:
    """Imports an ONNX file (docs/import.md). input_shapes gives the dims an exporter left
    dynamic: {"input_ids": (2, 64)}; input_dtypes declares inputs with another dtype:
    {"mask": "bool"}."""
    import os
    shapes = {k: list(v) for k, v in (input_shapes or {}).items()}
    dtypes = {k: v if isinstance(v, str) else _dtype_text(v) for k, v in (input_dtypes or {}).items()}
    return Model(_dtensor._Model.import_onnx(os.fspath(path), shapes, dtypes, fuse))


def from_torch(module, example_inputs: tuple, *, input_names: Sequence[str] | None = None,
               output_names: Sequence[str] | None = None, opset: int = 17) -> Model:
    """Exports a torch.nn.Module through torch.onnx and imports it (needs torch)."""
    from ._torch import export_module
    return export_module(module, example_inputs, input_names, output_names, opset, import_onnx)


def load_safetensors(path) -> dict:
    """Reads a safetensors file: {name: ndarray} (bf16 tensors as uint16 bit patterns)."""
    import os
    return _dtensor.load_safetensors(os.fspath(path))


def save_safetensors(path, tensors: dict) -> None:
    """Writes {name: ndarray} to a safetensors file (uint16 arrays as bf16)."""
    import os
    _dtensor.save_safetensors(os.fspath(path), tensors)


__all__ += ["load_safetensors", "save_safetensors", "Model", "CompiledModel", "TrainResult", "load", "import_onnx", "from_torch"]
