"""Anti-cheat: the tricks the static checks name, and what in a source gives each one away.

The tables here (modules, calls and attributes per trick; the Python spellings of each heavy aten op)
are read by ``tools.checks``, which walks a candidate's syntax tree. ``Finding`` is one trick at one
line; ``blocking`` applies the tolerance policy to the precision findings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
L2_PERSISTENCE = "l2_persistence"
# Tricks only running the candidate shows (tools.runtime_checks and the worker name them).
INPUT_MUTATION = "input_mutation"
CONSTANT_OUTPUT = "constant_output"
UNINITIALISED_MEMORY = "uninitialised_memory"
HARD_CODED_SHAPE = "hard_coded_shape"
STATIC_TRICKS = (
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
    L2_PERSISTENCE,
)
DYNAMIC_ONLY_TRICKS = (INPUT_MUTATION, CONSTANT_OUTPUT, UNINITIALISED_MEMORY, HARD_CODED_SHAPE)
TRICKS = STATIC_TRICKS + DYNAMIC_ONLY_TRICKS


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
# What of threading starts no thread: its locks and other synchronisation primitives, and queries. A candidate may
# import threading for these (a Lock around a kernel built on first use); any other name of it (Thread, Timer,
# _start_new_thread, current_thread().__class__ ...) and anything of the other THREAD_MODULES is flagged.
THREAD_SAFE_NAMES = frozenset(
    f"threading.{name}"
    for name in ("Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore", "Event", "Barrier",
                 "BrokenBarrierError", "local", "get_ident", "get_native_id", "active_count", "TIMEOUT_MAX")
)  # fmt: skip
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
FRAME_MODULES = ("inspect", "gc", "__main__", "sandbox", "tools.timing", "tools.correctness", "sandbox.evaluation")
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
# Callables that read or write attributes by a name given at the call: passed as a value (to functools.reduce, map),
# they are called with arguments the checks never see.
REFLECTIVE_CALLABLES = frozenset(
    {*(f"builtins.{n}" for n in ("getattr", "setattr", "delattr", "vars", "__import__", "eval", "exec")),
     "operator.attrgetter", "operator.methodcaller", "importlib.import_module"}
)  # fmt: skip
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
# Calls that set a persisting-L2 carve-out or an access-policy window (trailing names, any module).
L2_CALL_NAMES = ("deviceSetLimit", "cudaDeviceSetLimit", "cudaStreamSetAttribute", "streamSetAttribute",
                 "cuStreamSetAttribute", "cuCtxSetLimit", "cudaAccessPolicyWindow")  # fmt: skip
CONTAINERS = {
    "dict",
    "list",
    "collections.OrderedDict",
    "collections.defaultdict",
    "weakref.WeakKeyDictionary",
    "weakref.WeakValueDictionary",
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
C_L2_PERSIST = re.compile(r"accessPolicyWindow|cudaAccessPolicyWindow|PersistingL2|cudaAccessPropertyPersisting")
C_THREAD = re.compile(r"\bpthread_detach\b|\.detach\s*\(\s*\)|\bfork\s*\(\s*\)")
# Inline PTX names its types after a dot (cvt.rn.f16x2.f32, mma...bf16.bf16): read as the C spellings are.
C_LOW_PRECISION = {
    "float16": re.compile(r"\b__half2?\b|cuda_fp16\.h|__float2half|\bhalf2?\s*\*|\.f16(x2)?\b"),
    "bfloat16": re.compile(r"__nv_bfloat16|cuda_bf16\.h|__float2bfloat16|\.bf16(x2)?\b"),
    "tf32": re.compile(r"\btf32\b|wmma::precision::tf32|__float_to_tf32"),
}
C_SOURCE = re.compile(r'__global__|#include|extern\s+"C"|#define|#pragma|\bvoid\s+\w+\s*\(')
C_FAST_MATH = re.compile(r"-?-use_fast_math")
FORGERY_STRINGS = re.compile(r"KFRG\d?|result[-_]fd|/proc/self/fd|/dev/fd|/proc/\d+/fd")
# A printed verdict-like record: a "status" key of a JSON text ('{"status": "ok"}'). A message that merely says the
# word ("status: non-finite output") is a debug line, not a record any reader could take for a verdict.
STATUS_KEY = re.compile(r"""["']status["']\s*:""")

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
    "mm": {"mm", "matmul", "bmm", "addmm", "baddbmm", "addbmm", "linear", "Linear", "einsum", "tensordot",
           "chain_matmul", "multi_dot", "inner", "dot", "vdot", "mv", "addmv", "matrix_power", "Bilinear",
           "bilinear", "__matmul__"},
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


# ------------------------------------------------------------------ the library exemption (epilogue fusion)
#
# A problem that is one matmul or convolution followed by pointwise ops (bias, activation, scale, clamp) is won
# by fusing the pointwise tail into one pass over the heavy op's output, not by re-implementing cuBLAS/cuDNN.
# For such a problem (and only such) a candidate may call the library for the heavy op, provided the torch ops
# it runs are that heavy op and ops that only allocate, copy or re-view memory: every pointwise op of the tail
# must then be the candidate's own kernel. The worker checks this on the ops the candidate actually ran and says
# in the result that the heavy op ran in the library.

# Ops computing each output element from the same element of their operands (and scalars); in-place variants
# (relu_, mul_ ...) count as their op.
POINTWISE_OPS = frozenset(
    {"add", "sub", "rsub", "mul", "div", "neg", "abs", "reciprocal", "pow", "sqrt", "rsqrt", "exp", "exp2",
     "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tanh", "sigmoid", "erf", "sign", "sgn", "floor",
     "ceil", "trunc", "round", "frac", "relu", "gelu", "silu", "mish", "hardswish", "hardsigmoid", "hardtanh",
     "elu", "celu", "selu", "leaky_relu", "softplus", "threshold", "hardshrink", "softshrink",
     "log_sigmoid_forward", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "fmax", "fmin", "where",
     "masked_fill", "addcmul", "addcdiv", "lerp", "gt", "ge", "lt", "le", "eq", "ne", "logical_not",
     "logical_and", "logical_or", "scalar_tensor",
     # constants a forward makes (torch.full, torch.ones_like, x.new_zeros ...): the tracer folds them into the tail
     "full", "full_like", "new_full", "ones", "ones_like", "new_ones", "zeros", "zeros_like", "new_zeros"}
)  # fmt: skip
# Ops that only allocate, copy or re-view memory: they compute nothing from the data.
LAYOUT_OPS = frozenset(
    {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze", "alias",
     "detach", "as_strided", "slice", "select", "clone", "contiguous", "copy_", "_to_copy", "lift_fresh", "empty",
     "empty_like", "empty_strided", "new_empty", "new_empty_strided", "diag_embed"}
)  # fmt: skip
# The families a candidate may leave to a vendor library, and which library that is (GPU, CPU).
LIBRARY_FAMILIES = {"mm": ("cuBLAS", "the CPU BLAS"), "convolution": ("cuDNN", "oneDNN")}


def aten_base(op: str) -> str:
    """``aten.addmm.default`` or ``addmm`` -> ``addmm``; an in-place ``relu_`` -> ``relu``."""
    parts = op.split(".")
    base = parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]
    if base.endswith("_") and not base.startswith("_") and base[:-1] in POINTWISE_OPS:
        return base[:-1]
    return base


def library_family(aten_ops: dict[str, int]) -> str | None:
    """The heavy family a candidate may run in the library: the reference runs exactly one mm-family or
    convolution op, at least one pointwise op, and otherwise only layout ops; else None (the usual rule)."""
    heavy: dict[str, int] = {}
    pointwise = 0
    for op, count in aten_ops.items():
        base = aten_base(op)
        family = ATEN_FAMILY.get(base)
        if family is not None:
            heavy[family] = heavy.get(family, 0) + count
        elif base in POINTWISE_OPS:
            pointwise += count
        elif base not in LAYOUT_OPS:
            return None  # a reduction, a random op, anything else: not a heavy op + pointwise tail
    if len(heavy) != 1 or pointwise == 0:
        return None
    ((family, count),) = heavy.items()
    return family if family in LIBRARY_FAMILIES and count == 1 else None
