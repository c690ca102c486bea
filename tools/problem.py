"""Load and describe KernelBench-format problems: ``Model``, ``get_inputs()``, ``get_init_inputs()``.

A problem file is loaded unmodified. Its metadata (shapes, parameters, FLOPs, bytes moved, the aten
ops the reference runs) comes from one forward pass on meta tensors, so describing a 1 GiB problem
costs no memory; files that cannot run on meta fall back to a CPU pass when small enough.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import types
import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, Field
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from tools.errors import ProblemError
from tools.memory import make_plan, tensor_bytes
from tools.paths import cache_dir, write_atomic

SCALAR_TYPES = (bool, int, float)
CPU_FALLBACK_LIMIT = 1 << 30  # bytes of inputs we accept to materialise on the CPU for metadata
_module_counter = itertools.count()


class TensorSpec(BaseModel):
    shape: list[int]
    dtype: str
    nbytes: int


class ProblemInfo(BaseModel):
    """What a problem computes and how much work it is: enough to compute its roofline floor."""

    name: str
    path: str
    sha256: str
    inputs: list[TensorSpec | bool | int | float] = Field(description="tensor specs; scalars as their value")
    outputs: list[TensorSpec]
    init_inputs: str = Field(description="repr of get_init_inputs()")
    n_parameters: int
    parameter_bytes: int
    flops: int = Field(description="torch's flop counter; 0 for ops it does not count (softmax, norms)")
    bytes_moved: int = Field(description="inputs read once + outputs written once + parameters read once")
    aten_ops: dict[str, int] = Field(description="aten overloads the reference runs, with counts")
    analysed_on: str = Field(description="'meta' or 'cpu': where the metadata pass ran")
    eager_peak_bytes: int = Field(
        0,
        description="bytes alive at the peak of one eager forward: parameters, inputs, temporaries and output, from "
        "the storages the metadata pass kept alive (0: not measured, in records saved before it was)",
    )
    inputs_peak_bytes: int = Field(
        0,
        description="bytes alive at the peak of one get_inputs() call: the inputs it returns and the temporaries it "
        "made them with (0: not measured)",
    )

    @property
    def input_bytes(self) -> int:
        return sum(spec.nbytes for spec in self.inputs if isinstance(spec, TensorSpec))

    @property
    def output_bytes(self) -> int:
        return sum(spec.nbytes for spec in self.outputs)


class _OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


class _LiveBytes(TorchDispatchMode):
    """The bytes of every storage alive after each op the forward runs: their maximum is the eager peak.

    A storage counts from the first tensor seen on it until the last of its tensors is freed (weak-reference
    callbacks, O(1) an op), so a temporary the forward drops stops counting as it would on a device, and views count
    once, with their base.
    """

    def __init__(self, held: list[torch.Tensor]) -> None:
        super().__init__()
        self._tensors: dict[int, int] = {}  # storage key -> live tensors on it
        self._sizes: dict[int, int] = {}
        self._seen: set[int] = set()  # ids of tracked tensor objects (an op may return one of its inputs)
        self.live = 0
        for t in held:
            self._track(t)
        self.peak = self.live

    def _track(self, t: torch.Tensor) -> None:
        if id(t) in self._seen:
            return
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in self._tensors:
            self._tensors[key], self._sizes[key] = 0, storage.nbytes()
            self.live += self._sizes[key]
        self._tensors[key] += 1
        self._seen.add(id(t))
        weakref.finalize(t, self._release, key, id(t))

    def _release(self, key: int, ident: int) -> None:
        self._seen.discard(ident)
        self._tensors[key] -= 1
        if not self._tensors[key]:
            self.live -= self._sizes.pop(key)
            del self._tensors[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_flatten(out)[0]:
            if isinstance(leaf, torch.Tensor):
                self._track(leaf)
        self.peak = max(self.peak, self.live)
        return out


def _spec(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(
        shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."), nbytes=t.numel() * t.element_size()
    )


def import_source(source: str, filename: str, what: str) -> types.ModuleType:
    """Execute Python source as a fresh module under a unique name; its exceptions pass through."""
    code = compile(source, filename, "exec")
    module = types.ModuleType(f"kforge_{what}_{next(_module_counter)}")
    module.__file__ = filename
    sys.modules[module.__name__] = module  # dataclasses, pickling and inspect look modules up here
    exec(code, module.__dict__)
    return module


def exec_source(source: str, filename: str, what: str) -> types.ModuleType:
    """Like ``import_source``, but any failure becomes a one-line ProblemError."""
    try:
        return import_source(source, filename, what)
    except SyntaxError as exc:
        raise ProblemError(f"{filename}: syntax error at line {exc.lineno}: {exc.msg}") from exc
    except Exception as exc:
        raise ProblemError(f"{filename}: importing it raised {one_line(exc)}") from exc


@dataclass
class Problem:
    """A loaded problem: its source, its module and its metadata."""

    path: Path
    source: str
    module: types.ModuleType
    info: ProblemInfo

    @property
    def name(self) -> str:
        return self.info.name

    def init_inputs(self) -> list[Any]:
        return list(self.module.get_init_inputs())

    def make_model(self, device: str | torch.device, seed: int) -> nn.Module:
        return build_model(self.module.Model, self.init_inputs(), device, seed)

    def make_inputs(self, device: str | torch.device, seed: int) -> list[Any]:
        return make_inputs(self.module.get_inputs, device, seed)


def build_model(cls: type[nn.Module], init_inputs: list[Any], device: str | torch.device, seed: int) -> nn.Module:
    """Construct ``cls`` on ``device`` from a fixed seed (so two models built alike get equal weights)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls(*init_inputs)
    return model.to(device)


def copy_parameters(reference: nn.Module, candidate: nn.Module) -> int:
    """Copy reference weights into the candidate wherever name and shape match; return how many."""
    return copy_state(reference.state_dict(), candidate)


def copy_state(state: Mapping[str, torch.Tensor], candidate: nn.Module) -> int:
    """Copy ``state`` (a reference's ``state_dict``) into the candidate wherever name and shape match; how many."""
    theirs = candidate.state_dict()
    copied = 0
    with torch.no_grad():
        for name, value in state.items():
            if name in theirs and theirs[name].shape == value.shape:
                theirs[name].copy_(value)
                copied += 1
    return copied


def make_inputs(get_inputs: Callable[[], Any], device: str | torch.device, seed: int) -> list[Any]:
    """Call ``get_inputs()`` with a fixed seed, creating tensors directly on ``device``.

    KernelBench files make their inputs with ``torch.randn`` and friends; under a device context those
    land on the GPU at once (1 GiB in ~1 ms on an H200 instead of ~2.4 s on the CPU).
    """
    torch.manual_seed(seed)
    with torch.device(device):
        inputs = list(get_inputs())
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _check_inputs(inputs: Any, filename: str) -> list[Any]:
    if not isinstance(inputs, list | tuple):
        raise ProblemError(f"{filename}: get_inputs() must return a list of tensors, got {type(inputs).__name__}")
    for i, x in enumerate(inputs):
        if not isinstance(x, (torch.Tensor, *SCALAR_TYPES)):
            raise ProblemError(f"{filename}: get_inputs()[{i}] is a {type(x).__name__}, not a tensor or number")
    if not any(isinstance(x, torch.Tensor) for x in inputs):
        raise ProblemError(f"{filename}: get_inputs() returned no tensor")
    return list(inputs)


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``: error messages must stay on one line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class _StageError(Exception):
    """A step of the metadata pass failed; ``stage`` says which, for the one-line message."""

    def __init__(self, stage: str, exc: Exception) -> None:
        super().__init__(f"{stage} raised {one_line(exc)}")
        self.stage = stage


def _stage(stage: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ProblemError:
        raise
    except Exception as exc:
        raise _StageError(stage, exc) from exc


def _analyse(
    module: types.ModuleType, filename: str, device: str
) -> tuple[list[Any], list[Any], nn.Module, Counter[str], int, int, int]:
    init = _stage("get_init_inputs()", module.get_init_inputs)
    if not isinstance(init, list | tuple):
        raise ProblemError(f"{filename}: get_init_inputs() must return a list, got {type(init).__name__}")

    made = _LiveBytes([])

    def raw_inputs() -> Any:
        with torch.device(device), made:
            return module.get_inputs()

    inputs = _check_inputs(_stage("get_inputs()", raw_inputs), filename)
    model = _stage("Model(*get_init_inputs())", lambda: build_model(module.Model, list(init), device, seed=0))
    recorder = _OpRecorder()
    flop_counter = FlopCounterMode(display=False)
    held = [x for x in [*inputs, *model.parameters(), *model.buffers()] if isinstance(x, torch.Tensor)]
    live = _LiveBytes(held)

    def forward() -> Any:
        with torch.no_grad(), flop_counter, recorder, live:
            return model(*inputs)

    outputs, _ = tree_flatten(_stage("Model.forward", forward))
    return inputs, outputs, model, recorder.ops, flop_counter.get_total_flops(), live.peak, made.peak


def _input_bytes_on_meta(module: types.ModuleType) -> int | None:
    try:
        with torch.device("meta"):
            inputs = module.get_inputs()
    except Exception:  # a file that cannot make meta inputs is sized by the CPU pass instead
        return None
    return tensor_bytes(inputs)


def load_problem(path: str | Path) -> Problem:
    """Load and validate a KernelBench problem file; raise ProblemError with a one-line reason."""
    path = Path(path)
    if path.is_dir():
        raise ProblemError(f"{path}: a folder, not a problem file (`kforge batch` takes folders)")
    if not path.is_file():
        raise ProblemError(f"{path}: no such problem file")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProblemError(f"{path}: not a UTF-8 text file") from exc
    filename = str(path)
    module = exec_source(source, filename, "problem")
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, name):
            raise ProblemError(
                f"{filename}: defines no `{name}` (a KernelBench problem needs Model, get_inputs, get_init_inputs)"
            )
    if not (isinstance(module.Model, type) and issubclass(module.Model, nn.Module)):
        raise ProblemError(f"{filename}: `Model` is not an nn.Module subclass")
    for name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name)):
            raise ProblemError(f"{filename}: `{name}` is not callable")

    sha256 = hashlib.sha256(source.encode()).hexdigest()
    cached = _cached_info(sha256)
    if cached is not None:
        info = cached.model_copy(update={"name": path.stem, "path": filename})
        return Problem(path=path, source=source, module=module, info=info)
    info = _describe(module, path, source, sha256)
    _cache_info(info)
    return Problem(path=path, source=source, module=module, info=info)


# The metadata pass runs the whole forward on meta tensors: level 3's recurrent networks unroll into ~50,000 ops
# there (15-55 s each), and a batch loads a problem three times. Its result depends on the source and torch alone;
# ANALYSIS names what the pass records, so a change to it never reads a stale record.
ANALYSIS = "3"  # 2: eager_peak_bytes; 3: inputs_peak_bytes


def _info_file(sha256: str) -> Path:
    key = hashlib.sha256(f"{sha256}:{torch.__version__}:{ANALYSIS}".encode()).hexdigest()[:32]
    return cache_dir("problems") / f"{key}.json"


def _cached_info(sha256: str) -> ProblemInfo | None:
    path = _info_file(sha256)
    if not path.is_file():
        return None
    return ProblemInfo.model_validate_json(path.read_text())


def _cache_info(info: ProblemInfo) -> None:
    write_atomic(_info_file(info.sha256), info.model_dump_json().encode())


def _describe(module: types.ModuleType, path: Path, source: str, sha256: str) -> ProblemInfo:
    """The metadata pass: one forward on meta tensors (on the CPU where an op has no meta kernel)."""
    filename = str(path)
    analysed_on = "meta"
    try:
        inputs, outputs, model, ops, flops, eager_peak, inputs_peak = _analyse(module, filename, "meta")
    except _StageError as meta_exc:
        # Some ops have no meta kernel (data-dependent shapes, .item()): redo the pass on real CPU
        # tensors, which also reports genuine errors in the file with the CPU's message.
        size = _input_bytes_on_meta(module)
        if size is not None and size > CPU_FALLBACK_LIMIT:
            raise ProblemError(
                f"{filename}: {meta_exc} on meta tensors, and the inputs are too large for a CPU pass"
            ) from meta_exc
        analysed_on = "cpu"
        try:
            inputs, outputs, model, ops, flops, eager_peak, inputs_peak = _analyse(module, filename, "cpu")
        except _StageError as exc:
            raise ProblemError(f"{filename}: {exc}") from exc

    if not outputs or not all(isinstance(o, torch.Tensor) for o in outputs):
        raise ProblemError(f"{filename}: Model.forward must return a tensor or a tuple of tensors")
    params = list(model.parameters()) + list(model.buffers())
    parameter_bytes = tensor_bytes(params)
    in_specs: list[TensorSpec | bool | int | float] = [_spec(x) if isinstance(x, torch.Tensor) else x for x in inputs]
    out_specs = [_spec(o) for o in outputs]
    return ProblemInfo(
        name=path.stem,
        path=filename,
        sha256=sha256,
        inputs=in_specs,
        outputs=out_specs,
        init_inputs=repr(list(module.get_init_inputs())),
        n_parameters=sum(p.numel() for p in model.parameters()),
        parameter_bytes=parameter_bytes,
        flops=int(flops),
        bytes_moved=sum(s.nbytes for s in in_specs if isinstance(s, TensorSpec))
        + sum(s.nbytes for s in out_specs)
        + parameter_bytes,
        aten_ops=dict(ops.most_common()),
        analysed_on=analysed_on,
        eager_peak_bytes=eager_peak,
        inputs_peak_bytes=inputs_peak,
    )


def working_set_bytes(info: ProblemInfo, n_checks: int = 5, device: str = "cuda", float64: bool = True) -> int:
    """The device memory an evaluation of ``info`` needs at its peak: ``tools.memory``'s plan, from the eager peak
    (``float64`` False: the plan of a job that did not run the float64 reference)."""
    i = info
    return make_plan(
        i.eager_peak_bytes,
        i.parameter_bytes,
        i.input_bytes,
        i.output_bytes,
        n_checks,
        device,
        float64,
        make_peak=i.inputs_peak_bytes,
        separate=device == "cpu",  # a CPU job's candidate runs in the runner (tools.protocol.EvalJob.split)
    ).peak


def check_fits(info: ProblemInfo, device: str, available_bytes: int, n_checks: int = 5) -> int:
    """Raise ProblemError when the evaluation's working set cannot fit on the device; else return that estimate."""
    working_set = working_set_bytes(info, n_checks, device)
    if working_set > available_bytes:
        gib = 1 << 30
        raise ProblemError(
            f"{info.path}: too large for {device}: evaluating needs about {working_set / gib:.1f} GiB "
            f"(one eager forward {max(info.eager_peak_bytes, info.input_bytes + info.output_bytes) / gib:.1f} GiB), "
            f"{available_bytes / gib:.1f} GiB available"
        )
    return working_set
