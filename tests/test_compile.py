"""tools.compile: NVRTC (no GPU needed) and the system C compiler, with caching and mapped line numbers."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from tools.compile import (
    build_c,
    check_candidate_cuda,
    embedded_cuda_sources,
    load_c,
    map_c_log_to_candidate,
    nvrtc_compile,
    nvrtc_version,
    uses_load_inline,
)
from tools.errors import CompileError

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "candidates"
CUDA_CANDIDATES = sorted((ROOT / "problems" / "candidates").glob("*_cuda.py"))
MARKER = "COMPILE ERROR ON THIS LINE"

ADD_KERNEL = """\
extern "C" __global__ void add(const float* __restrict__ a, float* __restrict__ b, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] += a[i];
}
"""

# The error is on line 3 of this source.
BROKEN_KERNEL = """\
extern "C" __global__ void broken(float* out)
{
    out[threadIdx.x] = undefined_thing * 2.0f;
}
"""

WGMMA_KERNEL = """\
extern "C" __global__ void fence_only()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
"""


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty compile cache for this test alone."""
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path))
    return tmp_path


def marker_line(path: Path) -> int:
    lines = path.read_text().splitlines()
    hits = [i for i, line in enumerate(lines, start=1) if MARKER in line]
    assert len(hits) == 1, f"{path} should mark exactly one line"
    return hits[0]


# ----------------------------------------------------------------------------------------- NVRTC


def test_nvrtc_version() -> None:
    assert re.fullmatch(r"\d+\.\d+", nvrtc_version())
    assert int(nvrtc_version().split(".")[0]) >= 12


def test_nvrtc_compile_and_cache(cache: Path) -> None:
    first = nvrtc_compile(ADD_KERNEL)
    assert first.ok, first.log
    assert first.target == "nvrtc"
    assert first.arch == "sm_90a"
    assert not first.cached
    assert first.seconds > 0
    assert first.diagnostics == []
    assert first.artifact is not None
    cubin = Path(first.artifact)
    assert cubin.is_file()
    assert cache in cubin.parents
    assert cubin.read_bytes()[:4] == b"\x7fELF"

    second = nvrtc_compile(ADD_KERNEL)
    assert second.ok and second.cached
    assert second.seconds == 0.0
    assert second.artifact == first.artifact

    other = nvrtc_compile(ADD_KERNEL, options=["-lineinfo"])
    assert other.ok and not other.cached
    assert other.artifact is not None and other.artifact != first.artifact
    assert Path(other.artifact).is_file()

    other_arch = nvrtc_compile(ADD_KERNEL, arch="sm_80")
    assert other_arch.ok and not other_arch.cached and other_arch.arch == "sm_80"

    # The first entry is still there, untouched by the others.
    assert nvrtc_compile(ADD_KERNEL).cached


def test_nvrtc_use_cache_false_recompiles(cache: Path) -> None:
    assert not nvrtc_compile(ADD_KERNEL).cached
    assert not nvrtc_compile(ADD_KERNEL, use_cache=False).cached


def test_nvrtc_error_line_is_mapped(cache: Path) -> None:
    report = nvrtc_compile(BROKEN_KERNEL, line_offset=10, label="my_candidate.py")
    assert not report.ok
    assert report.artifact is None
    errors = [d for d in report.diagnostics if d.severity == "error"]
    assert errors, report.log
    assert errors[0].line == 3 + 10
    assert "undefined_thing" in errors[0].message
    assert "my_candidate.py:13: error:" in report.log
    assert "kernel.cu(" not in report.log

    cached = nvrtc_compile(BROKEN_KERNEL, line_offset=10, label="my_candidate.py")
    assert cached.cached and not cached.ok
    assert cached.diagnostics == report.diagnostics


def test_nvrtc_error_without_offset(cache: Path) -> None:
    report = nvrtc_compile(BROKEN_KERNEL, name="broken.cu")
    assert not report.ok
    assert [d.line for d in report.diagnostics if d.severity == "error"] == [3]
    assert "broken.cu:3: error:" in report.log


def test_wgmma_compiles_for_sm_90a_only(cache: Path) -> None:
    report = nvrtc_compile(WGMMA_KERNEL, arch="sm_90a")
    assert report.ok, report.log
    assert report.artifact is not None and Path(report.artifact).is_file()
    # The same code is rejected for an architecture without wgmma, so the check above means something.
    assert not nvrtc_compile(WGMMA_KERNEL, arch="sm_80").ok


# ------------------------------------------------------------------------------ candidate sources


def test_check_candidate_cuda_reports_the_marked_line(cache: Path) -> None:
    path = FIXTURES / "syntax_error_cuda.py"
    expected = marker_line(path)
    reports = check_candidate_cuda(path.read_text(), filename=str(path))
    assert len(reports) == 1
    report = reports[0]
    assert not report.ok
    error_lines = [d.line for d in report.diagnostics if d.severity == "error"]
    assert expected in error_lines, report.log
    assert f"{path}:{expected}: error:" in report.log
    assert any("row_max" in d.message for d in report.diagnostics)


@pytest.mark.parametrize("path", CUDA_CANDIDATES, ids=lambda p: p.stem)
def test_builtin_cuda_candidates_compile(cache: Path, path: Path) -> None:
    source = path.read_text()
    reports = check_candidate_cuda(source, filename=str(path))
    assert len(reports) == len(embedded_cuda_sources(source)) >= 1
    for report in reports:
        assert report.ok, report.log
        assert report.arch == "sm_90a"
        assert not [d for d in report.diagnostics if d.severity == "error"]


def test_builtin_cuda_candidates_found() -> None:
    assert {p.stem for p in CUDA_CANDIDATES} >= {"matmul_cuda", "softmax_cuda", "layernorm_cuda"}


def test_load_inline_candidates_are_skipped() -> None:
    source = 'from torch.utils.cpp_extension import load_inline\nSRC = "__global__ void k() { nope; }"\n'
    assert uses_load_inline(source)
    assert check_candidate_cuda(source) == []


def test_embedded_cuda_sources() -> None:
    candidate = '''\
import torch

NOT_A_KERNEL = "int x = 1;"

FIRST = r"""
extern "C" __global__ void a(float* x) { x[0] = 1.0f; }
"""


def helper():
    return 1


SECOND = (
    "extern \\"C\\" __global__ void b(float* x) { x[0] = 2.0f; }"
)
'''
    found = embedded_cuda_sources(candidate)
    assert [s.first_line for s in found] == [5, 15]
    assert [s.label for s in found] == ["line 5", "line 15"]
    assert found[0].text == '\nextern "C" __global__ void a(float* x) { x[0] = 1.0f; }\n'
    assert found[1].text.startswith('extern "C" __global__ void b')
    # A kernel whose first text line sits on the literal's line: line numbers map 1:1.
    lines = candidate.splitlines()
    assert "void b" in lines[found[1].first_line - 1]


VALID_KERNEL_LITERAL = 'SRC = r"""\nextern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n"""\n'


@pytest.mark.parametrize(
    "candidate",
    [
        pytest.param('"""Launches one __global__ kernel."""\n' + VALID_KERNEL_LITERAL, id="docstring"),
        pytest.param('N = 4\nSRC = f"extern \\"C\\" __global__ void k(float* x) {{ x[{N}] = 0; }}"\n', id="f-string"),
        pytest.param('BODY = "}"\nSRC = "extern \\"C\\" __global__ void k(float* x) {" + BODY\n', id="concat"),
    ],
)
def test_check_candidate_cuda_accepts_valid_candidates(cache: Path, candidate: str) -> None:
    compile(candidate, "candidate.py", "exec")  # valid Python
    reports = check_candidate_cuda(candidate)
    assert all(r.ok for r in reports), [r.log for r in reports]


# ------------------------------------------------------------------------------------------- C


SCALE_C = """\
#include <stdint.h>

void scale(float* x, int64_t n, float a)
{
    for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

int64_t add3(int64_t a, int64_t b, int64_t c) { return a + b + c; }
"""

BROKEN_C = """\
int broken(void)
{
    int y = 1;
    return y + not_declared;
}
"""


def test_load_c_is_callable_through_ctypes(cache: Path) -> None:
    lib = load_c(SCALE_C, name="scale")
    lib.add3.restype = ctypes.c_int64
    lib.add3.argtypes = [ctypes.c_int64] * 3
    assert lib.add3(1, 2, 3) == 6
    lib.scale.restype = None
    lib.scale.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_int64, ctypes.c_float]
    values = (ctypes.c_float * 4)(1.0, 2.0, -3.0, 0.5)
    lib.scale(values, 4, 2.0)
    assert list(values) == [2.0, 4.0, -6.0, 1.0]


def test_build_c_report_and_cache(cache: Path) -> None:
    first = build_c(SCALE_C, name="scale")
    assert first.ok, first.log
    assert first.target == "c"
    assert not first.cached
    assert 0 < first.seconds < 2.0
    assert first.artifact is not None
    library = Path(first.artifact)
    assert library.is_file() and cache in library.parents
    assert library.read_bytes()[:4] == b"\x7fELF"

    second = build_c(SCALE_C, name="scale")
    assert second.ok and second.cached
    assert second.seconds == 0.0
    assert second.artifact == first.artifact

    other_flags = build_c(SCALE_C, name="scale", flags=("-O1",))
    assert other_flags.ok and not other_flags.cached
    assert other_flags.artifact != first.artifact


def test_build_cxx(cache: Path) -> None:
    source = '#include <vector>\nextern "C" int count(int n) { std::vector<int> v(n); return (int)v.size(); }\n'
    lib = load_c(source, name="count", lang="c++")
    assert lib.count(7) == 7


def test_c_compile_error(cache: Path) -> None:
    with pytest.raises(CompileError) as raised:
        load_c(BROKEN_C, name="broken")
    error = raised.value
    assert "broken" in str(error)
    assert "line 4" in str(error)
    assert "not_declared" in str(error)
    assert "broken.c:4: error:" in error.log
    assert str(cache) not in error.log  # the temporary source path is replaced by the name

    report = build_c(BROKEN_C, name="broken")
    assert not report.ok and report.cached
    assert report.artifact is None
    assert [d.line for d in report.diagnostics if d.severity == "error"] == [4]


def test_c_compile_error_log_names_the_current_source(cache: Path) -> None:
    build_c(BROKEN_C, name="first")
    report = build_c(BROKEN_C, name="second")
    assert report.name == "second"
    assert "second.c:4: error:" in report.log


def test_c_errors_map_to_the_candidate_line_only_for_an_exact_literal() -> None:
    c_src = "int f(int a) {\n  return a + nope;\n}\n"
    candidate = f'import x\n\nSRC = """{c_src}"""\n'
    log = "kernel.c:2: error: ‘nope’ undeclared"
    mapped = map_c_log_to_candidate(log, c_src, candidate, "cand.py")
    assert mapped is not None
    text, diagnostics = mapped
    assert text == "cand.py:4: error: ‘nope’ undeclared" and diagnostics[0].line == 4
    assert map_c_log_to_candidate(log, c_src + "// built at run time\n", candidate, "cand.py") is None
