"""One root exception for everything kernelforge raises on purpose, with typed subclasses.

The CLI turns any of these into a one-line message and exit code 2 (bad input) or 3 (environment).
"""

from __future__ import annotations


class KernelforgeError(Exception):
    """Root of kernelforge's own errors. ``exit_code`` is what the CLI exits with."""

    exit_code = 2


class ProblemError(KernelforgeError):
    """A problem file that cannot be used: syntax error, missing names, bad inputs, too large."""


class CandidateError(KernelforgeError):
    """A candidate file that cannot even be read (missing file, not UTF-8, syntax error)."""


class CompileError(KernelforgeError):
    """A kernel failed to compile. ``log`` holds the compiler's output with candidate line numbers."""

    def __init__(self, message: str, log: str = "", source: str | None = None) -> None:
        super().__init__(message)
        self.log = log
        self.source = source  # the kernel source that failed, so callers can map lines back


class ConfigError(KernelforgeError):
    """An option or configuration value that makes no sense."""


class EnvironmentProblem(KernelforgeError):
    """The machine lacks something the request needs (a GPU, a compiler, NVRTC)."""

    exit_code = 3


class SandboxError(KernelforgeError):
    """The sandbox itself failed (could not start a worker); never used for a candidate's own faults."""

    exit_code = 3
