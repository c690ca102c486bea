"""Compile kernels: CUDA C through NVRTC (no GPU needed) and C/C++ through the system compiler.

Both paths cache their output keyed by a hash of the source, the options and the compiler version,
and report errors with line numbers of the file the user wrote (for CUDA embedded in a candidate's
Python source: the candidate's own line numbers).
"""

from __future__ import annotations

import ast
import ctypes
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tools.errors import CompileError, EnvironmentProblem
from tools.paths import unique_suffix, writable_cache_dir, write_atomic

DEFAULT_ARCH = "sm_90a"
# NVRTC reports `name(LINE): error: message`; gcc/clang report `name:LINE:COL: error: message`.
_NVRTC_DIAG = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<sev>error|warning)\s*:?\s*(?P<msg>.*)$")
_CC_DIAG = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:\d+:)? (?P<sev>error|warning|fatal error): (?P<msg>.*)$")


class Diagnostic(BaseModel):
    """One compiler message, its line already mapped to the file the user wrote."""

    severity: Literal["error", "warning"]
    line: int | None = Field(description="1-based line in the user's file (candidate .py or kernel source)")
    message: str


class CompileReport(BaseModel):
    """The result of compiling one kernel source."""

    ok: bool
    target: Literal["nvrtc", "c"]
    arch: str = Field(description="sm_XX for NVRTC, the compiler's name for C")
    name: str = Field(description="name of the source (kernel function or library)")
    seconds: float = Field(description="wall time of the compile; 0 when served from the cache")
    cached: bool
    log: str = Field(description="the compiler's log, line numbers mapped to the user's file")
    diagnostics: list[Diagnostic] = []
    artifact: str | None = Field(default=None, description="path of the cubin / shared library")


@dataclass(frozen=True)
class EmbeddedSource:
    """A CUDA C source found as a string literal inside a candidate's Python source."""

    text: str
    first_line: int  # line of the candidate file on which the kernel text's first line stands
    label: str


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def _map_diagnostics(log: str, pattern: re.Pattern[str], line_offset: int, label: str) -> tuple[str, list[Diagnostic]]:
    diagnostics: list[Diagnostic] = []
    out_lines = []
    for raw in log.splitlines():
        m = pattern.match(raw.strip())
        if not m:
            out_lines.append(raw)
            continue
        line = int(m["line"]) + line_offset
        severity = "warning" if m["sev"] == "warning" else "error"
        diagnostics.append(Diagnostic(severity=severity, line=line, message=m["msg"].strip()))
        out_lines.append(f"{label}:{line}: {severity}: {m['msg'].strip()}")
    return "\n".join(out_lines).strip(), diagnostics


# ----------------------------------------------------------------------------------------- NVRTC


@functools.cache
def nvrtc_version() -> str:
    """NVRTC's version as 'major.minor', or raise EnvironmentProblem when it cannot be loaded."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # the package is a hard dependency; a broken install is the user's to fix
        raise EnvironmentProblem(f"NVRTC is unavailable (cuda-bindings: {exc})") from exc
    err, major, minor = nvrtc.nvrtcVersion()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise EnvironmentProblem(f"NVRTC did not load: {err}")
    return f"{major}.{minor}"


def _cuda_include_dirs() -> list[str]:
    dirs = []
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and Path(root, "include", "cuda_runtime.h").exists():
            dirs.append(str(Path(root, "include")))
            break
    return dirs


def nvrtc_compile(
    source: str,
    *,
    arch: str = DEFAULT_ARCH,
    options: Sequence[str] = (),
    name: str = "kernel.cu",
    line_offset: int = 0,
    label: str | None = None,
    use_cache: bool = True,
) -> CompileReport:
    """Compile CUDA C to a cubin for ``arch`` with NVRTC. Needs no GPU.

    ``line_offset`` is added to NVRTC's line numbers so that errors point into the file the user
    edits; ``label`` names that file in the mapped log.
    """
    from cuda.bindings import nvrtc

    version = nvrtc_version()
    opts = [f"-arch={arch}", "-std=c++17", *options, *(f"-I{d}" for d in _cuda_include_dirs())]
    key = _digest("nvrtc", version, source, *opts, name, str(line_offset), label or name)
    folder = writable_cache_dir("nvrtc", key[:2])
    meta_path, cubin_path = folder / f"{key}.json", folder / f"{key}.cubin"
    if use_cache and meta_path.exists():
        report = CompileReport.model_validate_json(meta_path.read_text())
        if not report.ok or cubin_path.exists():
            return report.model_copy(update={"cached": True, "seconds": 0.0})

    start = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise EnvironmentProblem(f"nvrtcCreateProgram failed: {err}")
    try:
        encoded = [o.encode() for o in opts]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, buf)
        raw_log = buf.rstrip(b"\0 ").decode(errors="replace")
        ok = status == nvrtc.nvrtcResult.NVRTC_SUCCESS
        if ok:
            _, cubin_size = nvrtc.nvrtcGetCUBINSize(prog)
            cubin = b" " * cubin_size
            nvrtc.nvrtcGetCUBIN(prog, cubin)
            write_atomic(cubin_path, cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    log, diagnostics = _map_diagnostics(raw_log, _NVRTC_DIAG, line_offset, label or name)
    if not ok and not diagnostics:  # ptxas and linker errors carry no source line
        first = next((line.strip() for line in log.splitlines() if line.strip()), str(status))
        diagnostics = [Diagnostic(severity="error", line=None, message=first)]
    report = CompileReport(
        ok=ok,
        target="nvrtc",
        arch=arch,
        name=name,
        seconds=time.perf_counter() - start,
        cached=False,
        log=log,
        diagnostics=diagnostics,
        artifact=str(cubin_path) if ok else None,
    )
    write_atomic(meta_path, report.model_dump_json().encode())
    return report


# CPython 3.11's AST constructor keeps its recursion depth per interpreter, not per thread: two threads parsing at once
# can fail with "AST constructor recursion depth mismatch" (seen in CI, where the tests compile renderings in threads).
_AST_LOCK = threading.Lock()


def embedded_cuda_sources(candidate_source: str) -> list[EmbeddedSource]:
    """Find the CUDA C kernels written as plain string literals in a candidate's Python source.

    Kernels built at run time (f-strings, concatenation) are not found here; they are compiled when
    the candidate is imported, and their errors surface then.
    """
    with _AST_LOCK:
        tree = ast.parse(candidate_source)
    # Only whole literals bound to a name or passed as an argument are kernel sources; docstrings,
    # pieces of f-strings and operands of `+` merely mention `__global__`.
    holders: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            holders.append(node.value)
        elif isinstance(node, ast.Call):
            holders.extend(node.args)
            holders.extend(k.value for k in node.keywords)
    found = []
    for node in holders:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            found.append(EmbeddedSource(text=node.value, first_line=node.lineno, label=f"line {node.lineno}"))
    return sorted(found, key=lambda s: s.first_line)


def map_c_log_to_candidate(
    log: str, c_source: str, candidate_source: str, filename: str
) -> tuple[str, list[Diagnostic]] | None:
    """Re-point a C compiler log at the candidate's own lines, when the C source is one of its literals.

    Only an exact match counts (a literal whose value is the very text that was compiled); sources
    built at run time keep their C line numbers (None is returned).
    """
    starts = [
        node.lineno
        for node in ast.walk(ast.parse(candidate_source))
        if isinstance(node, ast.Constant) and node.value == c_source
    ]
    if len(starts) != 1:
        return None
    return _map_diagnostics(log, _CC_DIAG, starts[0] - 1, filename)


def uses_load_inline(candidate_source: str) -> bool:
    """True when the candidate builds a torch extension (KernelBench form) instead of NVRTC."""
    return "load_inline" in candidate_source


def check_candidate_cuda(
    candidate_source: str, *, arch: str = DEFAULT_ARCH, filename: str = "candidate.py"
) -> list[CompileReport]:
    """Compile every CUDA string literal of a candidate with NVRTC, errors mapped to candidate lines.

    Sources meant for ``load_inline`` include torch headers NVRTC cannot see; they are skipped here
    and compiled by nvcc when the candidate is imported.
    """
    if uses_load_inline(candidate_source):
        return []
    reports = []
    for src in embedded_cuda_sources(candidate_source):
        reports.append(
            nvrtc_compile(src.text, arch=arch, name="kernel.cu", line_offset=src.first_line - 1, label=filename)
        )
    return reports


# ------------------------------------------------------------------------------------------- C/C++


def c_compiler(lang: Literal["c", "c++"] = "c") -> str:
    """The system compiler: $CC / $CXX, else cc / c++."""
    env_name, default = ("CC", "cc") if lang == "c" else ("CXX", "c++")
    found = shutil.which(os.environ.get(env_name, default))
    if not found:
        raise EnvironmentProblem(f"no {lang} compiler found (set ${env_name} or install gcc)")
    return found


@functools.cache
def _compiler_version(compiler: str) -> str:
    return subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout


DEFAULT_C_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fopenmp")


def build_c(
    source: str,
    *,
    name: str = "kernel",
    lang: Literal["c", "c++"] = "c",
    flags: Sequence[str] = DEFAULT_C_FLAGS,
    use_cache: bool = True,
) -> CompileReport:
    """Build a C/C++ source into a shared library; the report's ``artifact`` is its path."""
    compiler = c_compiler(lang)
    std = "-std=c11" if lang == "c" else "-std=c++17"
    args = [std, "-shared", "-fPIC", *flags]
    key = _digest("cc", _compiler_version(compiler), source, *args, lang, name)
    folder = writable_cache_dir("cc", key[:2])
    lib_path, meta_path = folder / f"{key}.so", folder / f"{key}.json"
    if use_cache and meta_path.exists():
        report = CompileReport.model_validate_json(meta_path.read_text())
        if not report.ok or lib_path.exists():
            return report.model_copy(update={"cached": True, "seconds": 0.0})

    suffix = ".c" if lang == "c" else ".cpp"
    src_path = folder / f"{key}{suffix}"
    write_atomic(src_path, source.encode())
    tmp_lib = folder / f".{key}.{unique_suffix()}.so"
    start = time.perf_counter()
    proc = subprocess.run(
        [compiler, *args, "-o", str(tmp_lib), str(src_path)], capture_output=True, text=True, check=False
    )
    ok = proc.returncode == 0
    if ok:
        os.replace(tmp_lib, lib_path)
    stderr = proc.stderr.replace(str(src_path), f"{name}{suffix}")
    log, diagnostics = _map_diagnostics(stderr, _CC_DIAG, 0, f"{name}{suffix}")
    report = CompileReport(
        ok=ok,
        target="c",
        arch=Path(compiler).name,
        name=name,
        seconds=time.perf_counter() - start,
        cached=False,
        log=log,
        diagnostics=diagnostics,
        artifact=str(lib_path) if ok else None,
    )
    write_atomic(meta_path, report.model_dump_json().encode())
    return report


def load_c(
    source: str, *, name: str = "kernel", lang: Literal["c", "c++"] = "c", flags: Sequence[str] = DEFAULT_C_FLAGS
) -> ctypes.CDLL:
    """Build (or reuse) a shared library from C source and load it; raise CompileError on failure.

    This is what CPU candidates call at import: ``lib = load_c(SRC)``, then ``lib.fn(ptr, ...)``.
    """
    report = build_c(source, name=name, lang=lang, flags=flags)
    if not report.ok:
        first = report.diagnostics[0] if report.diagnostics else None
        where = f" (line {first.line}: {first.message})" if first else ""
        raise CompileError(f"{name}: C compile failed{where}", log=report.log, source=source)
    assert report.artifact is not None
    return ctypes.CDLL(report.artifact)


def describe(reports: Sequence[CompileReport]) -> str:
    """A compact JSON summary of several compile reports, for logs."""
    return json.dumps([{"name": r.name, "ok": r.ok, "cached": r.cached, "s": round(r.seconds, 3)} for r in reports])
