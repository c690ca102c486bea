"""tools.problem: loading KernelBench problem files, their metadata, and one-line errors for bad ones."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tools.errors import ProblemError
from tools.problem import ProblemInfo, TensorSpec, check_fits, load_problem

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "problems"
BUILTIN = sorted(p for p in PROBLEMS.glob("*.py") if not p.name.startswith("_"))

# Pieces of a valid problem, combined with one broken piece per bad-file test.
HEADER = "import torch\nfrom torch import nn\n\n"
MODEL = textwrap.dedent(
    """
    class Model(nn.Module):
        def forward(self, x):
            return x * 2
    """
)
GET_INPUTS = textwrap.dedent(
    """
    def get_inputs():
        return [torch.randn(4, 4)]
    """
)
GET_INIT_INPUTS = textwrap.dedent(
    """
    def get_init_inputs():
        return []
    """
)


def write(tmp_path: Path, name: str, *parts: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + "\n".join(textwrap.dedent(p) for p in parts))
    return path


def load_error(path: Path) -> str:
    """Load ``path``, expect ProblemError, and return its message after the shared checks."""
    with pytest.raises(ProblemError) as info:
        load_problem(path)
    message = str(info.value)
    assert "\n" not in message, f"not one line: {message!r}"
    assert str(path) in message, f"does not name the problem: {message!r}"
    return message


# ------------------------------------------------------------------------------------ built-ins


def test_builtin_problems_exist() -> None:
    names = {p.stem for p in BUILTIN}
    assert {"matmul_4096", "layernorm_16x64x256x256", "softmax_4096x65536", "softmax_small"} <= names


@pytest.mark.parametrize("path", BUILTIN, ids=lambda p: p.stem)
def test_builtin_problem_loads(path: Path) -> None:
    problem = load_problem(path)
    info = problem.info
    assert problem.name == info.name == path.stem
    assert info.path == str(path)
    assert len(info.sha256) == 64
    # Describing a built-in problem never materialises its inputs, however large.
    assert info.analysed_on == "meta"
    assert info.inputs and all(isinstance(s, TensorSpec) for s in info.inputs)
    assert info.outputs and all(s.nbytes > 0 for s in info.outputs)
    assert info.bytes_moved == info.input_bytes + info.output_bytes + info.parameter_bytes
    assert info.aten_ops and all(n > 0 for n in info.aten_ops.values())


def test_matmul_4096_metadata() -> None:
    info = load_problem(PROBLEMS / "matmul_4096.py").info
    n = 4096
    assert info.flops == 2 * n**3
    assert info.bytes_moved == 3 * n * n * 4
    assert "aten.mm.default" in info.aten_ops
    assert [s.shape for s in info.inputs if isinstance(s, TensorSpec)] == [[n, n], [n, n]]
    assert [(s.shape, s.dtype) for s in info.outputs] == [([n, n], "float32")]
    assert info.n_parameters == 0
    assert info.init_inputs == "[]"


def test_layernorm_metadata() -> None:
    info = load_problem(PROBLEMS / "layernorm_16x64x256x256.py").info
    assert info.bytes_moved == 570425344
    assert info.n_parameters == 2 * 64 * 256 * 256
    assert info.parameter_bytes == 2 * 64 * 256 * 256 * 4
    assert info.analysed_on == "meta"
    assert info.outputs[0].shape == [16, 64, 256, 256]
    assert info.init_inputs == "[(64, 256, 256)]"
    assert any("layer_norm" in op for op in info.aten_ops)


@pytest.mark.parametrize(("name", "shape"), [("softmax_4096x65536", [4096, 65536]), ("softmax_small", [96, 3000])])
def test_softmax_metadata(name: str, shape: list[int]) -> None:
    info = load_problem(PROBLEMS / f"{name}.py").info
    nbytes = shape[0] * shape[1] * 4
    assert info.inputs == [TensorSpec(shape=shape, dtype="float32", nbytes=nbytes)]
    assert info.outputs == [TensorSpec(shape=shape, dtype="float32", nbytes=nbytes)]
    assert info.bytes_moved == 2 * nbytes
    assert info.flops == 0  # torch's flop counter does not count softmax
    assert info.aten_ops == {"aten._softmax.default": 1}
    assert info.n_parameters == 0


def test_load_problem_accepts_a_string_path() -> None:
    problem = load_problem(str(PROBLEMS / "softmax_small.py"))
    assert problem.path == PROBLEMS / "softmax_small.py"
    assert problem.source == (PROBLEMS / "softmax_small.py").read_text()


# ------------------------------------------------------------------------------------ bad files


def test_python_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import torch\n\nx = (\ndef f(:\n    pass\n")
    message = load_error(path)
    assert "syntax error" in message
    assert "line 4" in message


def test_missing_model(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, "no_model", GET_INPUTS, GET_INIT_INPUTS))
    assert "`Model`" in message


def test_missing_get_inputs(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, "no_get_inputs", MODEL, GET_INIT_INPUTS))
    assert "`get_inputs`" in message


def test_model_not_a_module(tmp_path: Path) -> None:
    plain = """
    class Model:
        def forward(self, x):
            return x
    """
    message = load_error(write(tmp_path, "plain_model", plain, GET_INPUTS, GET_INIT_INPUTS))
    assert "nn.Module" in message


def test_get_inputs_raises(tmp_path: Path) -> None:
    raising = """
    def get_inputs():
        raise RuntimeError("no inputs today")
    """
    message = load_error(write(tmp_path, "inputs_raise", MODEL, raising, GET_INIT_INPUTS))
    assert "get_inputs()" in message
    assert "RuntimeError" in message
    assert "no inputs today" in message


@pytest.mark.parametrize(("value", "kind"), [("torch.randn(4, 4)", "Tensor"), ('{"x": torch.randn(4, 4)}', "dict")])
def test_get_inputs_not_a_list(tmp_path: Path, value: str, kind: str) -> None:
    bad = f"""
    def get_inputs():
        return {value}
    """
    message = load_error(write(tmp_path, "inputs_not_list", MODEL, bad, GET_INIT_INPUTS))
    assert "get_inputs() must return a list" in message
    assert kind in message


def test_get_inputs_string_element(tmp_path: Path) -> None:
    bad = """
    def get_inputs():
        return [torch.randn(4, 4), "hello"]
    """
    message = load_error(write(tmp_path, "inputs_str", MODEL, bad, GET_INIT_INPUTS))
    assert "get_inputs()[1]" in message
    assert "str" in message


def test_get_inputs_no_tensor(tmp_path: Path) -> None:
    bad = """
    def get_inputs():
        return [1, 2.0]
    """
    message = load_error(write(tmp_path, "inputs_no_tensor", MODEL, bad, GET_INIT_INPUTS))
    assert "no tensor" in message


def test_get_init_inputs_raises(tmp_path: Path) -> None:
    bad = """
    def get_init_inputs():
        raise KeyError("init broke")
    """
    message = load_error(write(tmp_path, "init_raise", MODEL, GET_INPUTS, bad))
    assert "get_init_inputs()" in message
    assert "KeyError" in message
    assert "init broke" in message


def test_forward_raises(tmp_path: Path) -> None:
    bad = """
    class Model(nn.Module):
        def forward(self, x):
            raise ValueError("boom in forward")
    """
    message = load_error(write(tmp_path, "forward_raise", bad, GET_INPUTS, GET_INIT_INPUTS))
    assert "Model.forward" in message
    assert "ValueError: boom in forward" in message


def test_forward_raising_multiline_message_still_gives_one_line(tmp_path: Path) -> None:
    bad = """
    class Model(nn.Module):
        def forward(self, x):
            raise ValueError("first line\\nsecond line")
    """
    load_error(write(tmp_path, "forward_multiline", bad, GET_INPUTS, GET_INIT_INPUTS))


def test_import_of_missing_module(tmp_path: Path) -> None:
    message = load_error(
        write(tmp_path, "bad_import", "import kforge_no_such_module_xyz\n", MODEL, GET_INPUTS, GET_INIT_INPUTS)
    )
    assert "ModuleNotFoundError" in message
    assert "kforge_no_such_module_xyz" in message


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.py"
    path.write_bytes(b"import torch\n# caf\xe9 \xff\xfe\n")
    message = load_error(path)
    assert "UTF-8" in message


def test_missing_file(tmp_path: Path) -> None:
    message = load_error(tmp_path / "does_not_exist.py")
    assert "no such problem file" in message


# ----------------------------------------------------------------------------- metadata fallbacks


DATA_DEPENDENT = """
class Model(nn.Module):
    def forward(self, x):
        return x[x > 0].sum()
"""


def test_data_dependent_shapes_fall_back_to_cpu(tmp_path: Path) -> None:
    info = load_problem(write(tmp_path, "data_dependent", DATA_DEPENDENT, GET_INPUTS, GET_INIT_INPUTS)).info
    assert info.analysed_on == "cpu"
    assert info.inputs == [TensorSpec(shape=[4, 4], dtype="float32", nbytes=64)]
    assert info.outputs == [TensorSpec(shape=[], dtype="float32", nbytes=4)]
    assert any("nonzero" in op or "index" in op for op in info.aten_ops)


def test_data_dependent_shapes_with_huge_inputs_are_refused(tmp_path: Path) -> None:
    # 4 GiB of inputs: sized on meta tensors, never materialised on the CPU.
    huge = """
    def get_inputs():
        return [torch.randn(1 << 29, 2)]
    """
    message = load_error(write(tmp_path, "huge_data_dependent", DATA_DEPENDENT, huge, GET_INIT_INPUTS))
    assert "too large" in message


# ----------------------------------------------------------------------------------- check_fits


def test_check_fits() -> None:
    info = load_problem(PROBLEMS / "softmax_small.py").info
    with pytest.raises(ProblemError) as raised:
        check_fits(info, "cuda", available_bytes=1024)
    message = str(raised.value)
    assert "too large" in message
    assert "cuda" in message
    assert info.path in message
    assert "\n" not in message
    check_fits(info, "cuda", available_bytes=1 << 40)


def test_check_fits_counts_parameters() -> None:
    info = ProblemInfo(
        name="params_only",
        path="params_only.py",
        sha256="0" * 64,
        inputs=[TensorSpec(shape=[1], dtype="float32", nbytes=4)],
        outputs=[TensorSpec(shape=[1], dtype="float32", nbytes=4)],
        init_inputs="[]",
        n_parameters=1 << 28,
        parameter_bytes=1 << 30,
        flops=0,
        bytes_moved=(1 << 30) + 8,
        aten_ops={},
        analysed_on="meta",
    )
    with pytest.raises(ProblemError, match="too large"):
        check_fits(info, "cpu", available_bytes=1 << 30)
    check_fits(info, "cpu", available_bytes=1 << 32)


# ------------------------------------------------------------------------------ KernelBench style


CONV = """
class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x, scale):
        return self.conv(x) * scale


batch_size, in_channels, out_channels, kernel_size, height, width = 2, 3, 8, 3, 16, 16


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x, 2]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
"""


def test_kernelbench_conv2d_with_scalar_input(tmp_path: Path) -> None:
    info = load_problem(write(tmp_path, "conv2d_scaled", CONV)).info
    assert info.analysed_on == "meta"
    assert info.inputs == [TensorSpec(shape=[2, 3, 16, 16], dtype="float32", nbytes=2 * 3 * 16 * 16 * 4), 2]
    assert info.input_bytes == 2 * 3 * 16 * 16 * 4
    assert info.outputs[0].shape == [2, 8, 14, 14]
    assert info.init_inputs == "[3, 8, 3]"
    assert info.n_parameters == 8 * 3 * 3 * 3 + 8
    assert info.flops > 0
    # one multiply-add per output element per weight tap
    assert info.flops == 2 * (2 * 8 * 14 * 14) * (3 * 3 * 3)
    assert any("convolution" in op for op in info.aten_ops)


def test_problem_makes_equal_models_and_inputs_from_a_seed(tmp_path: Path) -> None:
    problem = load_problem(write(tmp_path, "conv2d_seeded", CONV))
    a, b = problem.make_model("cpu", seed=3), problem.make_model("cpu", seed=3)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert pa.equal(pb)
    x1, x2 = problem.make_inputs("cpu", seed=7), problem.make_inputs("cpu", seed=7)
    assert x1[0].equal(x2[0]) and x1[1] == x2[1] == 2
    assert not x1[0].equal(problem.make_inputs("cpu", seed=8)[0])


def test_the_metadata_pass_is_done_once_per_source_and_read_back_after(tmp_path: Path) -> None:
    """Level 3's recurrent networks take up to a minute on meta tensors, and a batch loads a problem three times:
    the second load of the same source (at any path) reads the first one's record; an edited source is analysed."""
    from tools.problem import _info_file

    source = (PROBLEMS / "softmax_small.py").read_text()
    first = tmp_path / "a.py"
    first.write_text(source)
    info = load_problem(first).info
    assert _info_file(info.sha256).is_file()
    _info_file(info.sha256).write_text(info.model_copy(update={"flops": 12345}).model_dump_json())
    moved = tmp_path / "b.py"
    moved.write_text(source)
    again = load_problem(moved).info
    assert again.flops == 12345 and again.name == "b" and again.path == str(moved)  # the record, renamed
    moved.write_text(source.replace("dim=1", "dim=-1"))
    assert load_problem(moved).info.flops == 0  # an edited source is a new record
