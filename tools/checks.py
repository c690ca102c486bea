"""Anti-cheat, the static half: read a candidate's source (never run it) and name the tricks it uses.

``static_findings(source, problem)`` walks the candidate's AST with every import alias resolved
(``import torch.nn.functional as F`` makes ``F.softmax`` read ``torch.nn.functional.softmax``) and
returns one ``Finding`` per trick and line. The tricks are those of issue 6 that show in source:
side streams, threads and processes, lazy tensor subclasses, patched timers (or other torch/time
globals), results cached across calls, the reference's own heavy op or model, reading the harness's
frames, forged verdicts and precision below the problem's dtype. String constants are read too, for
the few tricks that live in C/CUDA source (a created CUDA stream, a detached thread, half precision);
OpenMP and the ``ctypes`` calls that pass tensor pointers to C are legitimate and not reported.

A precision finding is ``policy_dependent``: the ``relaxed`` policy allows TF32/bf16/fp16 as long as
the answer is within its tolerance, ``strict`` does not. ``blocking(findings, policy)`` applies that.
The dynamic half (ops actually executed, streams of the launches, thread counts, ...) runs in the worker.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.problem import ProblemInfo

SIDE_STREAM = "side_stream"
THREAD = "thread"
LAZY_TENSOR = "lazy_tensor"
TIMER_PATCH = "timer_patch"
GLOBAL_STATE = "global_state"
RESULT_CACHE = "result_cache"
REFERENCE_OP = "reference_op"
REFERENCE_INHERITANCE = "reference_inheritance"
FRAME_INSPECTION = "frame_inspection"
DYNAMIC_CODE = "dynamic_code"
PRECISION_DOWNGRADE = "precision_downgrade"
VERDICT_FORGERY = "verdict_forgery"
TRICKS = (
    SIDE_STREAM,
    THREAD,
    LAZY_TENSOR,
    TIMER_PATCH,
    GLOBAL_STATE,
    RESULT_CACHE,
    REFERENCE_OP,
    REFERENCE_INHERITANCE,
    FRAME_INSPECTION,
    DYNAMIC_CODE,
    PRECISION_DOWNGRADE,
    VERDICT_FORGERY,
)


@dataclass(frozen=True)
class Finding:
    """One trick found at one line (1-based, of the candidate source; None when it has no place)."""

    trick: str
    line: int | None
    detail: str
    policy_dependent: bool = False  # True: allowed under the relaxed policy, rejected under strict

    def __str__(self) -> str:
        return f"{self.trick} at line {self.line}: {self.detail}"


def blocking(findings: list[Finding], policy: str) -> list[Finding]:
    """The findings that reject a candidate under ``policy`` ("relaxed" or "strict")."""
    return [f for f in findings if not f.policy_dependent or policy == "strict"]


# ----------------------------------------------------------------------------------- what is flagged

THREAD_MODULES = ("threading", "_thread", "concurrent", "multiprocessing", "asyncio", "subprocess")
THREAD_CALLS = {
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.popen",
    "os.posix_spawn",
    "os.posix_spawnp",
    "os.spawnl",
    "os.spawnv",
    "os.spawnlp",
    "os.spawnvp",
    "os.execv",
    "os.execvp",
    "pty.fork",
    "torch.jit.fork",
    "torch.jit._fork",
    "torch.multiprocessing",
}
FRAME_MODULES = ("inspect", "gc", "__main__", "sandbox", "tools.timing", "tools.correctness", "tools.evaluation")
FRAME_NAMES = {
    "sys._getframe",
    "sys._current_frames",
    "sys.modules",
    "sys.settrace",
    "sys.setprofile",
    "sys.exc_info",
    "threading.settrace",
    "threading.setprofile",
    "traceback.extract_stack",
    "traceback.walk_stack",
    "traceback.walk_tb",
    "traceback.format_stack",
    "traceback.print_stack",
    "traceback.StackSummary",
    "ctypes.pythonapi",
    "ctypes.py_object",
    "ctypes.PyDLL",
}
FRAME_ATTRS = {
    "f_back",
    "f_locals",
    "f_globals",
    "f_code",
    "tb_frame",
    "tb_next",
    "gi_frame",
    "cr_frame",
    "__globals__",
    "__closure__",
    "__subclasses__",
    "__builtins__",
}
FRAME_BUILTINS = {"globals", "vars", "locals"}
DYNAMIC_BUILTINS = {"exec", "eval", "compile", "__import__"}
PATCHED_ROOTS = ("time", "torch", "cupy", "timeit", "builtins", "numpy", "os", "sys", "tools", "sandbox", "ctypes")
TIMER_WORDS = ("time", "perf_counter", "monotonic", "synchronize", "elapsed", "Event", "record", "clock")
GLOBAL_CALLS = {
    "torch.set_num_threads",
    "torch.set_num_interop_threads",
    "torch.use_deterministic_algorithms",
    "torch.set_flush_denormal",
    "torch.set_default_dtype",
    "torch.set_default_device",
    "torch.cuda.set_per_process_memory_fraction",
    "torch.cuda.set_sync_debug_mode",
    "torch.cuda.memory.set_per_process_memory_fraction",
}
STREAM_CALLS = {
    "torch.cuda.Stream",
    "torch.Stream",
    "torch.cuda.streams.Stream",
    "torch.cuda.stream",
    "torch.cuda.StreamContext",
    "torch.cuda.set_stream",
    "torch.cuda.ExternalStream",
    "torch.cuda.graphs.CUDAGraph",
    "torch.cuda.CUDAGraph",
    "torch.cuda.graph",
    "cupy.cuda.Stream",
    "cupy.cuda.stream.Stream",
    "cupy.cuda.ExternalStream",
    "cupy.cuda.stream.ExternalStream",
    "cupy.cuda.Stream.ptds",
}
CACHE_DECORATORS = {"functools.cache", "functools.lru_cache", "functools.cached_property"}
KEY_CALLS = {"data_ptr", "_cdata", "tobytes", "storage", "untyped_storage"}
LOW_DTYPES = {
    "float16": ("torch.float16", "torch.half", "cupy.float16", "numpy.float16"),
    "bfloat16": ("torch.bfloat16",),
}
PRECISION_CALLS = {
    "torch.autocast",
    "torch.amp.autocast",
    "torch.cuda.amp.autocast",
    "torch.cpu.amp.autocast",
    "torch.set_float32_matmul_precision",
}
PRECISION_ATTRS = {"allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"}
PRECISION_METHODS = {"half": "float16", "bfloat16": "bfloat16"}
# Patterns in C/CUDA source strings.
C_STREAM = re.compile(r"\bcuda(StreamCreate\w*|StreamBeginCapture|GraphLaunch)\b|getStreamFromPool|cudaStreamPerThread")
C_THREAD = re.compile(r"\bpthread_detach\b|\.detach\s*\(\s*\)|\bfork\s*\(\s*\)")
C_LOW_PRECISION = {
    "float16": re.compile(r"\b__half2?\b|cuda_fp16\.h|__float2half|\bhalf2?\s*\*"),
    "bfloat16": re.compile(r"__nv_bfloat16|cuda_bf16\.h|__float2bfloat16"),
    "tf32": re.compile(r"\btf32\b|wmma::precision::tf32|__float_to_tf32"),
}
C_SOURCE = re.compile(r'__global__|#include|extern\s+"C"|#define|#pragma|\bvoid\s+\w+\s*\(')
C_FAST_MATH = re.compile(r"-?-use_fast_math")
FORGERY_STRINGS = re.compile(r"KFRG\d?|result[-_]fd|/proc/self/fd|/dev/fd|/proc/\d+/fd")

# The reference's heavy ops: the aten base name -> every Python spelling that computes it.
HEAVY_OPS: dict[str, set[str]] = {
    "softmax": {"softmax", "_softmax", "Softmax", "softmax_"},
    "log_softmax": {"log_softmax", "_log_softmax", "LogSoftmax"},
    "layer_norm": {"layer_norm", "native_layer_norm", "LayerNorm"},
    "group_norm": {"group_norm", "native_group_norm", "GroupNorm"},
    "batch_norm": {
        "batch_norm",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_no_training",
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
    },
    "instance_norm": {"instance_norm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"},
    "rms_norm": {"rms_norm", "_fused_rms_norm", "RMSNorm"},
    "mm": {"mm", "matmul", "bmm", "addmm", "baddbmm", "addbmm", "linear", "Linear", "einsum", "tensordot", "chain_matmul",
           "multi_dot", "inner", "dot", "vdot", "mv", "addmv", "matrix_power", "Bilinear", "bilinear", "__matmul__"},
    "convolution": {"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "Conv1d", "Conv2d", "Conv3d",
                    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "ConvTranspose1d",
                    "ConvTranspose2d", "ConvTranspose3d", "cudnn_convolution"},
    "attention": {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_efficient_attention", "MultiheadAttention", "multi_head_attention_forward"},
    "cumsum": {"cumsum", "cumsum_"},
    "sort": {"sort", "argsort", "topk", "msort"},
}  # fmt: skip
ATEN_FAMILY = {
    "_softmax": "softmax",
    "softmax": "softmax",
    "_log_softmax": "log_softmax",
    "log_softmax": "log_softmax",
    "native_layer_norm": "layer_norm",
    "layer_norm": "layer_norm",
    "native_group_norm": "group_norm",
    "group_norm": "group_norm",
    "native_batch_norm": "batch_norm",
    "_native_batch_norm_legit": "batch_norm",
    "_native_batch_norm_legit_no_training": "batch_norm",
    "_native_batch_norm_legit_functional": "batch_norm",
    "batch_norm": "batch_norm",
    "instance_norm": "instance_norm",
    "_fused_rms_norm": "rms_norm",
    "rms_norm": "rms_norm",
    "mm": "mm",
    "bmm": "mm",
    "addmm": "mm",
    "baddbmm": "mm",
    "matmul": "mm",
    "linear": "mm",
    "dot": "mm",
    "mv": "mm",
    "addmv": "mm",
    "convolution": "convolution",
    "_convolution": "convolution",
    "cudnn_convolution": "convolution",
    "_scaled_dot_product_flash_attention": "attention",
    "_scaled_dot_product_efficient_attention": "attention",
    "_scaled_dot_product_cudnn_attention": "attention",
    "scaled_dot_product_attention": "attention",
    "cumsum": "cumsum",
    "sort": "sort",
    "topk": "sort",
}
TORCH_OP_NAMESPACES = (
    "torch",
    "torch.nn.functional",
    "torch.nn",
    "torch.nn.modules",
    "torch._C._nn",
    "torch._C._VariableFunctions",
    "torch.ops.aten",
    "torch.special",
    "torch.linalg",
    "torch.Tensor",
    "torch._refs",
    "torch._decomp",
    "torch._prims",
    "torch.func",
)


def heavy_names(aten_ops: dict[str, int] | list[str]) -> set[str]:
    """Python spellings of the problem's heavy aten ops (``aten._softmax.default`` -> softmax, Softmax ...)."""
    names: set[str] = set()
    for op in aten_ops:
        parts = op.split(".")
        base = parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]
        family = ATEN_FAMILY.get(base)
        if family:
            names |= HEAVY_OPS[family]
    return names


# ----------------------------------------------------------------------------------------- analysis


class _Checker(ast.NodeVisitor):
    def __init__(self, source: str, heavy: set[str], low_dtypes: set[str]) -> None:
        self.source = source
        self.heavy = heavy
        self.low = low_dtypes  # dtypes below the problem's: float16, bfloat16, tf32
        self.aliases: dict[str, str] = {}  # local name -> dotted module path
        self.findings: list[Finding] = []
        self.defined_classes: set[str] = set()
        self.cached_functions: set[str] = set()
        self.module_containers: set[str] = set()  # module-level names bound to dicts/lists/None
        self.function_stack: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.module_names: set[str] = set()  # names bound at module level (C libraries, kernels, constants)

    # ---- helpers

    def add(self, trick: str, node: ast.AST | None, detail: str, policy_dependent: bool = False) -> None:
        line = getattr(node, "lineno", None)
        self.findings.append(Finding(trick, line, detail, policy_dependent))

    def dotted(self, node: ast.AST) -> str | None:
        """The fully qualified dotted name of a Name/Attribute chain, import aliases resolved."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                parts.append(node.args[0].value)
                return ".".join(reversed(parts))
            return None
        if not isinstance(node, ast.Name):
            return None
        root = self.aliases.get(node.id)
        if root is None:
            return None
        parts.append(root)
        return ".".join(reversed(parts))

    def in_forward(self) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for f in reversed(self.function_stack):
            if f.name in ("forward", "__call__"):
                return f
        return None

    def check_module_name(self, name: str, node: ast.AST) -> None:
        top = name.split(".")[0]
        if top in THREAD_MODULES or name.startswith("torch.multiprocessing") or name == "multiprocessing":
            self.add(THREAD, node, f"imports {name}: work on another thread or process escapes the timer")
        for m in FRAME_MODULES:
            if name == m or name.startswith(m + "."):
                self.add(FRAME_INSPECTION, node, f"imports {name}, which can read the harness's frames or objects")
        if name.startswith("tools.") and name.split(".")[1] not in ("compile", "errors"):
            self.add(FRAME_INSPECTION, node, f"imports the harness module {name}")

    def check_name(self, name: str, node: ast.AST) -> None:
        """Rules on a resolved dotted name, wherever it appears (called, passed, assigned)."""
        if name in STREAM_CALLS:
            self.add(SIDE_STREAM, node, f"uses {name}: work on a stream other than the current one escapes the timer")
        if name in THREAD_CALLS or name.startswith(tuple(m + "." for m in (*THREAD_MODULES, "torch.multiprocessing"))):
            self.add(THREAD, node, f"uses {name}: work on another thread or process escapes the timer")
        if name in FRAME_NAMES or name.startswith(("inspect.", "gc.", "sys._getframe")):
            self.add(FRAME_INSPECTION, node, f"uses {name}, which can read the harness's frames or objects")
        if name in GLOBAL_CALLS:
            self.add(GLOBAL_STATE, node, f"calls {name}, which changes how the reference runs too")
        if name in PRECISION_CALLS:
            self.add(PRECISION_DOWNGRADE, node, f"uses {name}: lower precision than fp32", True)
        for dtype, spellings in LOW_DTYPES.items():
            if name in spellings and dtype in self.low:
                self.add(PRECISION_DOWNGRADE, node, f"uses {name}, below the problem's precision", True)
        if name in CACHE_DECORATORS:
            pass  # judged on the decorated function
        if name in ("torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass") or name.startswith(
            ("torch.overrides", "torch.utils._python_dispatch", "torch._subclasses")
        ):
            self.add(LAZY_TENSOR, node, f"uses {name}: a tensor subclass or dispatch mode can compute lazily")
        if name.startswith("os.write") or name in ("os.fdopen", "os.dup2", "os.dup", "os.pwrite", "os.writev"):
            self.add(VERDICT_FORGERY, node, f"uses {name}: writing to raw file descriptors can forge the verdict")
        self.check_heavy(name, node)

    def check_heavy(self, name: str, node: ast.AST) -> None:
        if not self.heavy:
            return
        head, _, last = name.rpartition(".")
        if last in self.heavy and (head in TORCH_OP_NAMESPACES or head.startswith("torch.ops.aten")):
            self.add(REFERENCE_OP, node, f"uses {name}, the reference's own op")
        elif head.startswith("torch.ops.aten") and head.split(".")[-1] in self.heavy:
            self.add(REFERENCE_OP, node, f"uses {head}, the reference's own op")

    # ---- imports

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.asname:
                self.aliases[a.asname] = a.name
            else:
                self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]
            self.check_module_name(a.name, node)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = "." * node.level + (node.module or "")
        self.check_module_name(mod, node)
        for a in node.names:
            full = f"{mod}.{a.name}"
            self.aliases[a.asname or a.name] = full
            if a.name == "Model":
                self.add(REFERENCE_INHERITANCE, node, f"imports the problem's Model from {mod}")
            elif a.name != "*":
                self.check_module_name(full, node)
                self.check_name(full, node)
        self.generic_visit(node)

    # ---- names and attributes

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.dotted(node)
        if name is not None:
            self.check_name(name, node)
        if node.attr in FRAME_ATTRS:
            self.add(FRAME_INSPECTION, node, f"reads .{node.attr}, which reaches other frames or objects")
        if node.attr in PRECISION_ATTRS and isinstance(node.ctx, ast.Store) and "tf32" in self.low:
            self.add(PRECISION_DOWNGRADE, node, f"sets {node.attr}: TF32 or reduced-precision reductions", True)
        if node.attr in ("as_subclass", "_make_subclass", "_make_wrapper_subclass"):
            self.add(LAZY_TENSOR, node, f"uses .{node.attr}(): a tensor subclass can compute lazily")
        if name is None:
            self.generic_visit(node)
        else:  # a resolved chain: its inner links (cupy.cuda.Stream of ...Stream.from_external) are not uses
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Call):
                self.visit(base)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            if node.id in self.aliases and self.aliases[node.id] != node.id:
                name = self.aliases[node.id]
                # `from torch.nn.functional import softmax` then `softmax(x)`
                self.check_heavy(name, node)
            if node.id == "Model" and "Model" not in self.defined_classes:
                self.add(REFERENCE_INHERITANCE, node, "uses the problem's Model")
            if node.id in ("__builtins__", "__loader__", "__spec__"):
                self.add(FRAME_INSPECTION, node, f"reads {node.id}")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and "matmul" in self.heavy:
            self.add(REFERENCE_OP, node, "uses the @ operator: the reference's own matmul")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.MatMult) and "matmul" in self.heavy:
            self.add(REFERENCE_OP, node, "uses the @= operator: the reference's own matmul")
        self.check_targets([node.target], node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.check_string(node.value, node)
        elif isinstance(node.value, bytes):
            self.check_string(node.value.decode("latin-1"), node)
        self.generic_visit(node)

    def check_string(self, text: str, node: ast.Constant) -> None:
        m = FORGERY_STRINGS.search(text)
        if m:
            self.add(VERDICT_FORGERY, node, f"mentions {m.group(0)!r}, the worker's result channel")
        if not C_SOURCE.search(text):  # prose (docstrings) is not read for C patterns
            return
        first = node.lineno
        for pattern, trick, what, dependent in self.c_rules():
            m = pattern.search(text)
            if m:
                line = first + text.count("\n", 0, m.start())
                self.findings.append(Finding(trick, line, f"C/CUDA source {what} ({m.group(0).strip()!r})", dependent))

    def c_rules(self) -> list[tuple[re.Pattern[str], str, str, bool]]:
        rules = [
            (C_STREAM, SIDE_STREAM, "creates or uses its own CUDA stream", False),
            (C_THREAD, THREAD, "detaches a thread or forks", False),
        ]
        for dtype, pattern in C_LOW_PRECISION.items():
            if dtype in self.low:
                rules.append((pattern, PRECISION_DOWNGRADE, f"computes in {dtype}", True))
        return rules

    # ---- calls

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = self.dotted(func)
        fname = func.id if isinstance(func, ast.Name) else None
        if fname in DYNAMIC_BUILTINS and fname not in self.aliases:
            arg = node.args[0] if node.args else None
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            if fname == "__import__" and literal:
                self.check_module_name(arg.value, node)  # type: ignore[union-attr]
            else:
                self.add(DYNAMIC_CODE, node, f"calls {fname}(): code the checks cannot read")
        if fname in FRAME_BUILTINS and fname not in self.aliases and node.args:
            self.add(FRAME_INSPECTION, node, f"calls {fname}() on another object")
        if name in ("importlib.import_module", "importlib.__import__"):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self.check_module_name(arg.value, node)
            else:
                self.add(DYNAMIC_CODE, node, "imports a module whose name the checks cannot read")
        if fname in ("getattr", "setattr", "delattr", "hasattr") and fname not in self.aliases and node.args:
            target = self.dotted(node.args[0])
            attr = node.args[1] if len(node.args) > 1 else None
            literal = isinstance(attr, ast.Constant) and isinstance(attr.value, str)
            if target is not None:
                if literal:
                    self.check_name(f"{target}.{attr.value}", node)  # type: ignore[union-attr]
                    if attr.value in FRAME_ATTRS:  # type: ignore[union-attr]
                        self.add(FRAME_INSPECTION, node, f"reads .{attr.value}")  # type: ignore[union-attr]
                elif fname == "getattr":
                    self.add(DYNAMIC_CODE, node, f"getattr on {target} with a computed name")
                if fname in ("setattr", "delattr") and target.split(".")[0] in PATCHED_ROOTS:
                    self.patched(target + (f".{attr.value}" if literal else ""), node)  # type: ignore[union-attr]
        if (
            isinstance(func, ast.Attribute)
            and func.attr in self.heavy
            and self.dotted(func) is None
            and not (isinstance(func.value, ast.Name) and func.value.id in ("self", *self.module_names))
        ):  # x.softmax(...); not _lib.matmul(...), a C function bound at module level
            self.add(REFERENCE_OP, node, f"calls .{func.attr}(), the reference's own op")
        if (name and name.startswith("ctypes.")) or (
            isinstance(func, ast.Attribute) and func.attr in ("from_address", "string_at", "memmove", "cast")
        ):
            if any(
                isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id == "id"
                for a in node.args
                for s in ast.walk(a)
            ):
                self.add(FRAME_INSPECTION, node, "reads a Python object's memory through ctypes and id()")
        if fname == "open" and fname not in self.aliases and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, int):
                self.add(VERDICT_FORGERY, node, f"opens file descriptor {arg.value}: can forge the verdict")
        if isinstance(func, ast.Attribute) and func.attr in ("write", "writelines"):
            base = self.dotted(func.value)
            if base and base.startswith(("sys.stdout", "sys.stderr", "sys.__stdout__", "sys.__stderr__")):
                if self.mentions_status(node):
                    self.add(VERDICT_FORGERY, node, f"writes a verdict-like record to {base}")
        if fname == "print" and self.mentions_status(node):
            self.add(VERDICT_FORGERY, node, "prints a verdict-like record")
        if isinstance(func, ast.Attribute) and func.attr in PRECISION_METHODS:
            dtype = PRECISION_METHODS[func.attr]
            if dtype in self.low and self.dotted(func) is None:
                self.add(PRECISION_DOWNGRADE, node, f"converts to {dtype} with .{func.attr}()", True)
        for kw in node.keywords:
            if kw.arg == "non_blocking" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                self.add(SIDE_STREAM, node, "non_blocking transfer: its work can finish after the timer stops")
            if kw.arg == "options" or kw.arg == "extra_cuda_cflags":
                for sub in ast.walk(kw.value):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and C_FAST_MATH.search(sub.value):
                        if self.low:
                            self.add(PRECISION_DOWNGRADE, node, "compiles with --use_fast_math", True)
        self.check_cache_call(node)
        self.generic_visit(node)

    def mentions_status(self, node: ast.Call) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and re.search(r"\"?status\"?", sub.value):
                return True
        return False

    # ---- assignments: patching

    def patched(self, target: str, node: ast.AST) -> None:
        last = target.rsplit(".", 1)[-1]
        if last in PRECISION_ATTRS:
            return  # a precision setting, reported as such
        if target.startswith("torch.backends."):
            self.add(GLOBAL_STATE, node, f"sets {target}, which changes how the reference runs too")
            return
        if target.split(".")[0] in ("time", "timeit") or any(w in target for w in TIMER_WORDS):
            self.add(TIMER_PATCH, node, f"replaces {target}: the harness's clock must not be touched")
        else:
            self.add(TIMER_PATCH, node, f"patches {target}, a module the harness relies on")

    def check_targets(self, targets: list[ast.expr], node: ast.AST) -> None:
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store | ast.Del):
                    full = self.dotted(sub)
                    if full is not None and full.split(".")[0] in PATCHED_ROOTS:
                        self.patched(full, sub)
                if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Store | ast.Del):
                    base = self.dotted(sub.value)
                    if base is not None and base.split(".")[0] in PATCHED_ROOTS:
                        if base == "sys.modules":
                            continue  # frame_inspection already
                        if base == "os.environ":
                            self.add(GLOBAL_STATE, sub, "sets an environment variable the reference also sees")
                        else:
                            self.patched(base + "[...]", sub)
                    self.check_cache_subscript(sub)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.check_targets(node.targets, node)
        if not self.function_stack:
            v = node.value
            container = isinstance(v, ast.Dict | ast.List | ast.Set) or self.is_container_call(v)
            if container or (isinstance(v, ast.Constant) and v.value is None):
                self.module_containers.update(t.id for t in node.targets if isinstance(t, ast.Name))
        self.generic_visit(node)

    def is_container_call(self, value: ast.expr) -> bool:
        if isinstance(value, ast.Call):
            n = self.dotted(value.func) or (value.func.id if isinstance(value.func, ast.Name) else "")
            return n in ("dict", "list", "collections.OrderedDict", "collections.defaultdict", "weakref.WeakKeyDictionary",
                         "weakref.WeakValueDictionary")  # fmt: skip
        return False

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.check_targets([node.target], node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self.check_targets(node.targets, node)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        if self.in_forward():
            for n in node.names:
                self.module_containers.add(n)
        self.generic_visit(node)

    # ---- caching

    def is_key(self, expr: ast.AST) -> ast.AST | None:
        """A sub-expression naming a tensor by address, identity or content (data_ptr(), id(x), hash(x), ...)."""
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Call):
                f = sub.func
                if isinstance(f, ast.Name) and f.id in ("id", "hash") and f.id not in self.aliases:
                    return sub
                if isinstance(f, ast.Attribute) and f.attr in KEY_CALLS and self.dotted(f) is None:
                    return sub
            if isinstance(sub, ast.Attribute) and sub.attr == "_cdata":
                return sub
        return None

    def check_cache_subscript(self, sub: ast.Subscript) -> None:
        key = self.is_key(sub.slice)
        if key is not None:
            self.add(RESULT_CACHE, sub, "a container keyed by a tensor's address, identity or content")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load):
            self.check_cache_subscript(node)
        self.generic_visit(node)

    def check_cache_call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("get", "setdefault", "pop", "__getitem__", "__contains__"):
            if node.args and self.is_key(node.args[0]) is not None and self.dotted(f) is None:
                self.add(RESULT_CACHE, node, f"looks a result up by a tensor's address, identity or content (.{f.attr})")
        fwd = self.in_forward()
        if fwd is not None and isinstance(f, ast.Name) and f.id in self.cached_functions:
            params = {a.arg for a in fwd.args.args[1:]}
            if any(isinstance(a, ast.Name) and a.id in params for a in node.args):
                self.add(RESULT_CACHE, node, f"passes forward's inputs to the memoised {f.id}()")
        name = self.dotted(f)
        if name == "torch.equal" and fwd is not None and any(self.stored(a) for a in node.args):
            self.add(RESULT_CACHE, node, "compares an input with a stored tensor: a result replayed across calls")

    def stored(self, expr: ast.AST) -> bool:
        """An expression reading state kept across calls: self.<attr> or a module-level container."""
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                return True
            if isinstance(sub, ast.Name) and sub.id in self.module_containers:
                return True
        return False

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        if self.in_forward() is not None:
            keyed = any(self.is_key(s) is not None for s in sides)
            if keyed and any(self.stored(s) for s in sides):
                self.add(RESULT_CACHE, node, "compares an input's address, identity or content with a stored one")
            elif any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) and self.is_key(node.left) is not None:
                self.add(RESULT_CACHE, node, "looks a tensor's address, identity or content up in a container")
            elif any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
                fwd = self.in_forward()
                params = {a.arg for a in fwd.args.args[1:]} if fwd else set()
                names = {s.id for s in sides if isinstance(s, ast.Name)}
                if names & params and any(self.stored(s) for s in sides):
                    self.add(RESULT_CACHE, node, "tests whether an input is the same object as a stored one")
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        fwd = self.in_forward()
        if fwd is not None and node.value is not None and self.function_stack[-1] is fwd:
            value = node.value
            while isinstance(value, ast.Subscript | ast.Call) and not self.returns_computed(value):
                value = value.value if isinstance(value, ast.Subscript) else value.func.value  # type: ignore[attr-defined]
            if self.plain_stored(value):
                self.add(RESULT_CACHE, node, "forward returns a value kept from an earlier call")
        self.generic_visit(node)

    def returns_computed(self, value: ast.AST) -> bool:
        # container[key] and container.get(key) read stored state; any other call computes something.
        if isinstance(value, ast.Call):
            f = value.func
            return not (isinstance(f, ast.Attribute) and f.attr in ("get", "__getitem__", "pop", "setdefault"))
        return False

    def plain_stored(self, value: ast.AST) -> bool:
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
            return True
        if isinstance(value, ast.Attribute):
            return self.plain_stored(value.value)
        return isinstance(value, ast.Name) and value.id in self.module_containers

    # ---- definitions

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            b = self.dotted(base)
            if b in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter"):
                self.add(LAZY_TENSOR, node, f"class {node.name} derives from {b}: a tensor subclass can compute lazily")
            if b and b.startswith(("torch.utils._python_dispatch", "torch.overrides")):
                self.add(LAZY_TENSOR, node, f"class {node.name} derives from {b}: it intercepts torch's ops")
            if isinstance(base, ast.Name) and base.id == "Model" and "Model" not in self.defined_classes:
                self.add(REFERENCE_INHERITANCE, node, f"class {node.name} derives from the problem's Model")
            if b and b.rsplit(".", 1)[-1] in self.heavy and b.startswith("torch.nn"):
                self.add(REFERENCE_INHERITANCE, node, f"class {node.name} derives from {b}, the reference's module")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add(LAZY_TENSOR, node, f"defines {node.name}: it intercepts torch's ops")
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            d = self.dotted(target)
            if d in CACHE_DECORATORS:
                self.cached_functions.add(node.name)
                tensor_args = any(
                    a.annotation is not None and "Tensor" in ast.unparse(a.annotation) for a in node.args.args
                )
                if node.name in ("forward", "__call__") or tensor_args:
                    self.add(RESULT_CACHE, dec, f"memoises {node.name}() with {d}: results replayed across calls")
        if isinstance(node, ast.AsyncFunctionDef):
            self.add(THREAD, node, f"async def {node.name}: work that can finish after the timer stops")
        self.function_stack.append(node)
        self.generic_visit(node)
        self.function_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


def _low_dtypes(problem: ProblemInfo | None) -> set[str]:
    """The reduced precisions that would be a downgrade for this problem (those its tensors do not use)."""
    if problem is None:
        return {"float16", "bfloat16", "tf32"}
    used = {spec.dtype for spec in [*problem.inputs, *problem.outputs] if hasattr(spec, "dtype")}
    low = set()
    if used & {"float32", "float64"} or not used:
        low = {"float16", "bfloat16", "tf32"}
    if "float16" in used:
        low.discard("float16")
    if "bfloat16" in used:
        low.discard("bfloat16")
    return low


def static_findings(candidate_source: str, problem: ProblemInfo | None) -> list[Finding]:
    """Every trick visible in the candidate's source, in line order; [] for a clean (or unparsable) source."""
    try:
        tree = ast.parse(candidate_source)
    except SyntaxError:
        return []  # the compile step reports it
    heavy = heavy_names(problem.aten_ops if problem is not None else {})
    checker = _Checker(candidate_source, heavy, _low_dtypes(problem))
    # The classes the candidate defines first: a `Model` of its own is not the problem's.
    checker.defined_classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    checker.module_names = {
        t.id
        for stmt in tree.body
        if isinstance(stmt, ast.Assign | ast.AnnAssign)
        for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        for t in ast.walk(target)
        if isinstance(t, ast.Name)
    }
    checker.visit(tree)
    seen: set[tuple[str, int | None]] = set()
    out = []
    for f in sorted(checker.findings, key=lambda f: (f.line or 0, f.trick)):
        if (f.trick, f.line) not in seen:
            seen.add((f.trick, f.line))
            out.append(f)
    return out
