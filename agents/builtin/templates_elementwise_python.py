"""The Python every fused pointwise candidate shares, CPU and CUDA: broadcast geometry, the reference's
parameters held by name, the forward's checks and operands, the heavy op's library call, the docstring.
"""

from __future__ import annotations

from typing import Any

from agents.builtin._text import params_text as shared_params_text
from agents.builtin._text import wrap
from agents.builtin.pointwise import band, load
from agents.builtin.templates_elementwise_epilogue import tail_bias
from agents.builtin.templates_elementwise_expression import Expression, expression_text

Params = dict[str, Any]


BAND_PY = r'''

def _band(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, int]:
    """(size, inner): `shape` broadcast to `out` holds, at flat index i, its element (i // inner) % size."""
    shape, out = tuple(shape), tuple(out)
    while len(shape) > len(out) and shape[0] == 1:
        shape = shape[1:]
    if len(shape) > len(out):
        raise ValueError(f"{shape} does not broadcast to {out}")
    pad = (1,) * (len(out) - len(shape)) + shape
    dims = [d for d in range(len(out)) if pad[d] != 1]
    if not dims:
        return 1, 1
    lo, hi = dims[0], dims[-1] + 1
    if any(pad[d] != out[d] for d in range(lo, hi)):
        raise ValueError(f"{shape} is not one contiguous span of {out}")
    return math.prod(out[lo:hi]), math.prod(out[hi:])


def _lists(value):
    return [_lists(v) for v in value] if isinstance(value, list | tuple) else value


def _hold(module: nn.Module, name: str, shape: list[int]) -> None:
    """A parameter at the reference's state_dict name (the harness copies the reference's values in by name)."""
    *path, leaf = name.split(".")
    for part in path:
        if part not in module._modules:
            module.add_module(part, nn.Module())
        module = module._modules[part]
    module.register_parameter(leaf, nn.Parameter(torch.zeros(shape)))
'''

# The parts of a fused pointwise candidate's module every one shares (CPU, CUDA, the tail in a GEMM), filled from
# ``candidate_fields``: the docstring, the constants the forward reads (BAND_PY after them), the model class.
DOC_PY = r'''"""Builtin candidate `@TEMPLATE@` (agents.builtin).

@SUMMARY_DOC@

Parameters (besides the problem's spec): @PARAMS@.

Computes:
@EXPR@
"""
'''
CONSTANTS_PY = r"""_F32 = torch.float32
_INIT = @INIT@  # the constructor arguments this candidate was generated for
_PARAMS = @PARAMS_SHAPES@  # the reference's parameters this candidate reads, by state_dict name
_BANDS = @BANDS@  # broadcast operands' shapes as the reference used them
@BAND_PY@
"""
MODEL_PY = r'''
class ModelNew(nn.Module):
    """@CLASS_DOC@"""

    def __init__(self, *args):
@INIT_BODY@

    def forward(self, @ARGS@) -> torch.Tensor:
@FORWARD@
'''

INIT_PY = r"""        super().__init__()
        if _lists(list(args)) != _INIT:
            raise ValueError(f"this candidate was generated for Model(*{_INIT!r}), not Model(*{list(args)!r})")
        for name, shape in _PARAMS.items():
            _hold(self, name, shape)"""


def attr(name: str) -> str:
    """Python for a parameter of the model: `self.linear.weight`, or get_parameter for odd names."""
    if all(part.isidentifier() for part in name.split(".")):
        return f"self.{name}"
    return f"self.get_parameter({name!r})"


class Forward:
    """The candidate's forward body (checks, operands, broadcast geometry), shared by CPU and CUDA."""

    def __init__(self, spec: dict[str, Any], device: str) -> None:
        self.spec, self.device = spec, device
        self.expr = Expression(spec)
        self.n_in = len(spec["inputs"])
        self.numbers = set(spec.get("numbers", []))  # forward arguments that are Python numbers

    def operand(self, leaf: dict[str, Any]) -> str:
        if leaf["kind"] == "input":
            return f"x{leaf['key']}"
        if leaf["kind"] == "param":
            return attr(leaf["key"])
        return "h"

    def checks(self) -> list[str]:
        """The forward's first lines: each argument a number or a float32 tensor on the candidate's device."""
        lines: list[str] = []
        for k in sorted(self.numbers):
            lines += [f"if isinstance(x{k}, bool) or not isinstance(x{k}, int | float):"]
            lines += [f'    raise TypeError(f"x{k} must be a number, got {{type(x{k}).__name__}}")']
        for k in range(self.n_in):
            if k in self.numbers:
                continue
            place = "not x{k}.is_cuda" if self.device == "cuda" else "not x{k}.is_cpu"
            what = f"x{k} must be a float32 {self.device.upper()} tensor, got {{x{k}.dtype}} on {{x{k}.device}}"
            lines += [f"if x{k}.dtype != _F32 or {place.format(k=k)}:", f'    raise TypeError(f"{what}")']
        return lines

    def band_operand(self, k: int, device: str) -> str:
        """``w{k} = ...``: broadcast operand k as a contiguous tensor (a number argument as a 0-d one on ``device``)."""
        leaf = self.expr.leaves[self.expr.bands[k]]
        if leaf["kind"] == "input" and leaf["key"] in self.numbers:  # one float the kernel reads for every element
            return f"w{k} = torch.full((), float(x{leaf['key']}), dtype=_F32, device={device})"
        unsqueeze = "".join(f".unsqueeze({d})" for d in leaf.get("unsqueeze", []))  # a[:, None]
        return f"w{k} = {self.operand(leaf)}.contiguous(){unsqueeze}"

    def band_shape(self, k: int) -> str:
        """Broadcast operand k's shape: a parameter's as the reference used it is fixed; an input's is what it is."""
        return f"tuple(w{k}.shape)" if self.expr.leaves[self.expr.bands[k]]["kind"] == "input" else f"_BANDS[{k}]"

    def lines(
        self, params: Params, epilogue: bool, own_gemm: bool = False, half: bool = False
    ) -> tuple[list[str], list[str], list[str]]:
        """The lines up to the kernel call; the full operands' pointers; the broadcast ones' (ptr, inner, size).
        ``own_gemm``: the heavy op (a linear layer) by the candidate's ``_linear_bf16x3``, not the library.
        ``half``: the library's heavy op on fp16 copies of its operands; its fp16 result is the tail's to read."""
        e = self.expr
        lines = self.checks()
        layout = None  # the heavy op's operands in a channels-last memory format (a half convolution's option)
        if epilogue:
            if own_gemm:
                h = self.spec["heavy"]
                call, why = f"_linear_bf16x3(x{h['x']}, {attr(h['weight'])})", "three bf16 products, our kernels"
            elif half:
                lines.append(f"# {HALF_WHY}")
                layout = channels_last(self.spec) if params["layout"] == "nhwc" else None
                own_cast = layout is not None and params["cast"] == "kernel"
                library_bias = params["bias"] == "library"
                call = heavy_call(self.spec, library_bias, half=True, memory_format=layout, own_cast=own_cast)
                why = "cuDNN in fp16" + (", channels last" if layout else "") + (", our cast" if own_cast else "")
            else:
                call, why = heavy_call(self.spec, params["bias"] == "library"), "the heavy op stays in the library"
            # Channels-last, the tail kernel reads that order: cuDNN writes it, and then this copies nothing.
            lines += [f"h = {call}  # {why}", f"h = h.contiguous({f'memory_format={layout}' if layout else ''})"]
            if half:
                lines.append("out = torch.empty(h.shape, dtype=_F32, device=h.device)")
            else:
                lines.append("out = h" if params["inplace"] else "out = torch.empty_like(h)")
            first = "h"
        else:
            first = self.operand(e.leaves[e.full[0]])
            lines += [f"{first} = {first}.contiguous()", f"out = torch.empty_like({first})"]
        full_ptrs, band_args = [], []
        for j in e.full:
            name = self.operand(e.leaves[j])
            if name != first:
                lines.append(f"if {name}.shape != out.shape:")
                lines.append(f'    raise ValueError(f"operand {{tuple({name}.shape)}} is not the output\'s shape")')
                lines.append(f"{name} = {name}.contiguous()")
            full_ptrs.append(f"{name}.data_ptr()")
        for k, j in enumerate(e.bands):
            lines.append(self.band_operand(k, "out.device"))
            lines.append(f"size{k}, inner{k} = _band({self.band_shape(k)}, tuple(out.shape))")
            if self.device == "cpu" and self.lastdim(j):  # the C code reads it as a contiguous slice
                lines.append(f"if inner{k} != 1:")
                lines.append(f'    raise ValueError("operand {k} no longer runs along the last dim")')
            band_args += [f"w{k}.data_ptr()", f"inner{k}", f"size{k}"]
        lines += ["n = out.numel()", "if n == 0:", "    return out"]
        return lines, full_ptrs, band_args

    def lastdim(self, j: int) -> bool:
        size, inner = band(self.expr.leaves[j]["shape"], self.spec["out_shape"])
        return inner == 1 and size > 1

    def band_shapes(self) -> str:
        return repr(tuple(tuple(self.expr.leaves[j]["shape"]) for j in self.expr.bands))


# Why a half-precision convolution keeps the reference's precision (a comment above its call in the candidate).
HALF_WHY = "fp16 has the 10-bit mantissa of TF32, at which cuDNN runs fp32 convolutions by default"


def channels_last(spec: dict[str, Any]) -> str | None:
    """The channels-last memory format of the heavy op's operands (a 2-D or 3-D convolution), else None."""
    return {2: "torch.channels_last", 3: "torch.channels_last_3d"}.get(spec["heavy"].get("dims", 0))


def heavy_call(
    spec: dict[str, Any],
    bias_in_library: bool,
    half: bool = False,
    memory_format: str | None = None,
    own_cast: bool = False,
) -> str:
    """The library call for the heavy op; ``half``: a convolution on fp16 copies of its operands, in
    ``memory_format`` when given (a channels-last one); ``own_cast``: the input's copy by the candidate's
    ``_to_nhwc_half``, not torch."""
    h = spec["heavy"]
    if h["op"] == "linear":
        bias = attr(h["bias"]) if h["bias"] and bias_in_library else "None"
        return f"F.linear(x{h['x']}, {attr(h['weight'])}, {bias})"
    if h["op"] == "matmul":
        a = f"x{h['a'][1]}"
        b = f"x{h['b'][1]}" if h["b"][0] == "input" else attr(h["b"][1])
        return f"torch.matmul({a}, {b}{'.t()' if h['b_transposed'] else ''})"
    cast = ".to(torch.float16)" if half else ""
    bias = attr(h["bias"]) + cast if h["bias"] and bias_in_library else "None"
    if memory_format:
        cast = f".to(torch.float16, memory_format={memory_format})"
    x = f"_to_nhwc_half(x{h['x']})" if own_cast else f"x{h['x']}{cast}"
    weight, dims = attr(h["weight"]) + cast, h["dims"]
    if h["transposed"]:
        return (
            f"F.conv_transpose{dims}d({x}, {weight}, {bias}, {h['stride']}, {h['padding']}, "
            f"{h['output_padding']}, {h['groups']}, {h['dilation']})"
        )
    return f"F.conv{dims}d({x}, {weight}, {bias}, {h['stride']}, {h['padding']}, {h['dilation']}, {h['groups']})"


def doc_expr(spec: dict[str, Any], params: Params) -> str:
    text = expression_text(spec, limit=400)
    if spec["heavy"] and spec["heavy"].get("bias"):
        where = "in the library call" if params.get("bias", "tail") == "library" else "added in the tail"
        text += f"  (the heavy op's bias {spec['heavy']['bias']}: {where})"
    return wrap(text)


def py_tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def py_block(lines: list[str], indent: int = 8) -> str:
    return "\n".join(" " * indent + line for line in lines)


def spec_of(params: Params, template: str) -> dict[str, Any]:
    if not params.get("spec"):
        raise ValueError(f"{template} renders the problem's own expression: it needs the problem's spec")
    return load(params["spec"])


def class_doc(spec: dict[str, Any], epilogue: bool, own_gemm: bool = False, half: bool = False) -> str:
    if epilogue and own_gemm:
        return "The problem's linear layer by three bfloat16 tensor-core products, then its tail as one kernel."
    if epilogue and half:
        return "The problem's convolution by cuDNN in fp16, then its whole pointwise tail as one kernel (fp32 out)."
    if epilogue:
        return "The problem's heavy op through torch, then its whole pointwise tail as one kernel."
    return "The problem's pointwise chain as one kernel; same constructor arguments as the problem's Model."


def params_text(params: Params) -> str:
    return shared_params_text(params, hidden=("spec",))


def prepare(params: Params, template: str, epilogue: bool, device: str) -> tuple[dict[str, Any], bool, Forward]:
    """(spec, whether the tail writes in place, the forward) for one point; the bias moved into the tail when
    the point says so (or has no say: a template whose heavy op is its own kernel always adds it in the tail)."""
    spec = spec_of(params, template)
    if epilogue and params.get("bias", "tail") == "tail":
        spec = tail_bias(spec)
    return spec, bool(epilogue and params.get("inplace")), Forward(spec, device)


def candidate_fields(
    params: Params,
    summary: str,
    template: str,
    epilogue: bool,
    fw: Forward,
    lines: list[str],
    own_gemm: bool = False,
    half: bool = False,
) -> dict[str, str]:
    """The placeholders CPU and CUDA candidates fill alike: docstring, reference parameters, module, forward
    (``own_gemm``: the heavy op is the candidate's own GEMM; ``half``: the library's, in fp16)."""
    return {
        "TEMPLATE": template,
        "SUMMARY_DOC": wrap(summary),
        "PARAMS": params_text(params),
        "EXPR": doc_expr(fw.spec, params),
        "INIT": repr(fw.spec["init"]),
        "PARAMS_SHAPES": repr(fw.spec["params"]),
        "BANDS": fw.band_shapes(),
        "BAND_PY": BAND_PY,
        "CLASS_DOC": class_doc(fw.spec, epilogue, own_gemm, half),
        "INIT_BODY": INIT_PY,
        "ARGS": ", ".join(f"x{k}: {'float' if k in fw.numbers else 'torch.Tensor'}" for k in range(fw.n_in)),
        "FORWARD": py_block(lines),
    }
