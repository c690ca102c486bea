"""A run's settings: what to search, with which team, for how long. Saved in run.json for resume."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from sandbox.config import LocalSandboxConfig, SandboxConfig
from tools.protocol import Device, Policy, TimingConfig

DEFAULT_ROLES = ["planner", "coder", "profiler", "critic"]


class Budgets(BaseModel):
    """Caps that end a run cleanly with the best candidate so far. None: no cap."""

    wall_s: float | None = None
    tokens: int | None = None
    dollars: float | None = None
    gpu_s: float | None = Field(None, description="seconds of sandbox jobs (compile, checks, timing)")


class RunConfig(BaseModel):
    problem: str = Field(description="path of the KernelBench problem file")
    device: Device = "cuda"
    policy: Policy = "relaxed"
    model: str = "builtin"
    base_url: str | None = None
    rounds: int = Field(3, ge=1)
    ideas: int = Field(3, ge=1, description="ideas (and so candidates) per round")
    repair_attempts: int = Field(2, ge=0)
    implementations: int = Field(
        1, ge=1, description="LLM team: coders that each write their own implementation of every idea"
    )
    patience: int = Field(2, ge=1, description="stop after this many rounds without a better candidate")
    seed_builtin: bool = Field(
        True,
        description="an LLM team's rounds also get the builtin catalog's ideas (where a template applies), so the "
        "run keeps the best of both and is never worse than the builtin team alone",
    )
    budgets: Budgets = Budgets()
    roles: list[str] = Field(default_factory=lambda: list(DEFAULT_ROLES))
    sandbox: SandboxConfig = LocalSandboxConfig()
    n_checks: int = Field(5, ge=1)
    seed: int = 0
    compile_reference: bool = Field(True, description="time torch.compile in the baseline")
    timing: TimingConfig = TimingConfig()
    ncu: bool = Field(
        False,
        description="profile each round's fastest new candidate under Nsight Compute (CUDA): its kernels in "
        "candidates/<id>/profile.json, a summary in its diagnosis",
    )
    llm_timeout_s: float = Field(120.0, gt=0, description="how long one model call may take, s")
    temperature: float | None = Field(None, ge=0, description="the model's sampling temperature (None: its default)")
    max_tokens_per_call: int | None = Field(None, ge=1, description="each answer's token cap (None: the model's)")
    prices: tuple[float, float] | None = Field(
        None,
        description="US dollars per million input and output tokens (None: the model's list price; a model "
        "behind base_url then costs 0)",
    )

    @model_validator(mode="after")
    def _ncu_needs_cuda(self) -> RunConfig:
        if self.ncu and self.device != "cuda":
            raise ValueError(f"--ncu: Nsight Compute profiles CUDA kernels, and this run's device is {self.device}")
        return self

    @property
    def recursion_limit(self) -> int:
        """Supersteps a full run needs: per round one per role plus the fan-out, with headroom."""
        return self.rounds * (len(self.roles) + 2) + 10
