"""LLM strategies for the planner, coder and critic roles.

Each class holds the run's ``ChatSession`` and turns the graph's plain data (the problem source,
candidate dicts) into a prompt, asks, and returns parsed, validated data. The call records (tokens,
cost, the answers themselves) stay in the session; the graph node that calls a strategy decides what
goes into the run state and the trace. ``prompts(...)`` builds the (system, user) pair a call would
send, without calling, for tests and for ``kforge trace``.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents.answers import PROMPTS_DIR, ParseError, extract_code, extract_json, render_prompt
from agents.hardware import sheet
from agents.llm import ChatSession

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

EXAMPLES = PROMPTS_DIR / "examples"  # the worked example's problem and a candidate per target
MAX_SOURCE_CHARS = 30_000  # a candidate source longer than this is cut in prompts
MAX_LINE_CHARS = 400  # ideas, reasons, diagnoses and feedback in history lists
_NULL_IDS = {"", "null", "none", "reference", "ref"}


# ------------------------------------------------------------------------------------- formatting


def target(device: str) -> str:
    """``cpu`` for a device description that starts so, else ``cuda``."""
    return "cpu" if device.strip().lower().startswith("cpu") else "cuda"


def target_rules(device: str) -> str:
    """The toolchain rules for a device description (``cpu`` ..., else CUDA)."""
    return render_prompt(f"target_{target(device)}")


def worked_example(device: str) -> str:
    """A complete candidate for the target, beside the problem it solves (``agents/prompts/examples``: the tests
    verify both candidates for real, so the example cannot teach a format the harness refuses)."""
    return render_prompt(
        "example",
        example_problem=(EXAMPLES / "scaled_tanh.py").read_text(encoding="utf-8").rstrip("\n"),
        example_candidate=(EXAMPLES / f"scaled_tanh_{target(device)}.py").read_text(encoding="utf-8").rstrip("\n"),
    )


def system_prompt(device: str, policy: str = "relaxed") -> str:
    """The rules every role works under: the candidate contract, the tolerance ``policy`` and the toolchain."""
    if policy not in ("relaxed", "strict"):
        raise ValueError(f"unknown tolerance policy {policy!r} (relaxed or strict)")
    rules = render_prompt(f"policy_{policy}").rstrip("\n")
    return (
        render_prompt(
            "system", target_rules=target_rules(device), policy_rules=rules, example=worked_example(device)
        ).rstrip()
        + "\n"
    )


def _clip(text: Any, limit: int = MAX_LINE_CHARS) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _clip_source(source: str, limit: int = MAX_SOURCE_CHARS) -> str:
    source = source.rstrip("\n")
    if len(source) <= limit:
        return source
    return source[:limit] + f"\n# ... ({len(source) - limit} more characters not shown)"


def _x(value: Any) -> str | None:
    return f"{value:.2f}×" if isinstance(value, int | float) else None


def result_line(c: dict[str, Any]) -> str:
    """``ok · 1.23× vs best reference (1.50× vs eager) · 45% of roofline``, or the status and reason; ``· reduced
    precision`` when the relaxed policy let it compute below the problem's precision."""
    status = c.get("status") or "not evaluated"
    parts = [str(status)]
    if status != "ok" and c.get("reason"):
        parts[0] += f" ({_clip(c['reason'], 200)})"
    best, eager = _x(c.get("speedup_vs_best")), _x(c.get("speedup_vs_eager"))
    if best:
        parts.append(f"{best} vs best reference" + (f" ({eager} vs eager)" if eager else ""))
    elif eager:
        parts.append(f"{eager} vs eager")
    if isinstance(c.get("pct_roofline"), int | float):
        parts.append(f"{c['pct_roofline']:.0f}% of roofline")
    if c.get("reduced_precision"):
        parts.append("reduced precision")
    return " · ".join(parts)


def history_lines(history: list[dict[str, Any]]) -> str:
    if not history:
        return "(none yet)"
    lines = []
    for c in history:
        origin = f"from {c['parent_id']}" if c.get("parent_id") else "from the reference"
        head = f"- {c.get('id', '?')} (round {c.get('round', '?')}, {origin}): {result_line(c)}"
        lines.append(head)
        if c.get("idea"):
            lines.append(f"  idea: {_clip(c['idea'])}")
        if c.get("diagnosis"):
            lines.append(f"  diagnosis: {_clip(c['diagnosis'])}")
        if c.get("critic_reason"):
            lines.append(f"  critic: {_clip(c['critic_reason'])}")
    return "\n".join(lines)


def parent_record(parent: dict[str, Any] | None) -> str:
    """What the coder is told of the candidate it starts from, besides its code: how it did, why, and what the
    critic said of it (a line each, those known)."""
    if not parent:
        return ""
    lines = [f"How it did: {result_line(parent)}."]
    if parent.get("diagnosis"):
        lines.append(f"Its diagnosis: {_clip(parent['diagnosis'])}")
    if parent.get("critic_reason"):
        lines.append(f"The critic: {_clip(parent['critic_reason'])}")
    return "\n".join(lines) + "\n"


def reference_line(baseline: dict[str, Any] | None) -> str:
    """The times to beat, from the run's baseline: eager, torch.compile, and the roofline floor where known."""
    if not baseline or baseline.get("eager_ms") is None:
        return "Reference times: not measured."
    text = f"Reference times: eager {baseline['eager_ms']:.4f} ms"
    if baseline.get("compile_ms") is not None:
        text += f", torch.compile {baseline['compile_ms']:.4f} ms"
    text += f"; candidates are measured against the faster ({baseline.get('best_reference') or 'eager'})."
    if baseline.get("floor_ms"):
        text += f" Roofline floor: {baseline['floor_ms']:.4f} ms ({baseline.get('bound')}-bound)."
    return text


def best_section(best: dict[str, Any] | None, *, with_source: bool = True) -> str:
    if not best:
        return "No candidate has been accepted yet: the reference is the one to beat."
    text = f"Best candidate so far: {best.get('id', '?')}, {result_line(best)}."
    if best.get("diagnosis"):
        text += f"\nIts diagnosis: {_clip(best['diagnosis'])}"
    if with_source and best.get("source"):
        text += f"\n\n```python\n{_clip_source(best['source'])}\n```"
    return text


# ---------------------------------------------------------------------------------------- planner


class LLMPlanner:
    """Writes k optimisation ideas, each tied to a parent candidate (or None: the reference)."""

    role = "planner"

    def __init__(self, session: ChatSession, *, max_reasks: int = 2, policy: str = "relaxed") -> None:
        self.session = session
        self.max_reasks = max_reasks
        self.policy = policy  # the tolerance policy the system prompt states

    def prompts(
        self,
        problem_source: str,
        device: str,
        k: int,
        history: list[dict[str, Any]],
        best: dict[str, Any] | None,
        feedback: str,
        baseline: dict[str, Any] | None = None,
    ) -> tuple[str, str]:
        user = render_prompt(
            "planner",
            problem_source=problem_source.rstrip("\n"),
            hardware=sheet(device, baseline),
            reference=reference_line(baseline),
            k=k,
            history=history_lines(history),
            best_section=best_section(best),
            feedback=feedback.strip() or "(none yet)",
        )
        return system_prompt(device, self.policy), user

    def propose(
        self,
        problem_source: str,
        device: str,
        k: int,
        history: list[dict[str, Any]],
        best: dict[str, Any] | None,
        feedback: str,
        baseline: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """k dicts {"text", "expected_gain", "parent_id"}; a parent_id not in history becomes best's id or None."""
        known = {str(c["id"]) for c in history if c.get("id") is not None}
        fallback = str(best["id"]) if best and best.get("id") is not None else None
        if fallback is not None:
            known.add(fallback)
        system, user = self.prompts(problem_source, device, k, history, best, feedback, baseline)
        ideas, _ = self.session.ask(
            self.role,
            system,
            user,
            parse=lambda text: parse_ideas(text, k, known, fallback),
            max_reasks=self.max_reasks,
        )
        return ideas


def parse_ideas(text: str, k: int, known_ids: set[str], fallback: str | None) -> list[dict[str, Any]]:
    """Validate the planner's JSON list; ParseError (what the model is told) when unusable."""
    data = extract_json(text)
    if isinstance(data, dict) and isinstance(data.get("ideas"), list):
        data = data["ideas"]
    if not isinstance(data, list):
        raise ParseError(f"expected a JSON list of {k} idea objects, got a JSON {type(data).__name__}")
    ideas: list[dict[str, Any]] = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ParseError(f"idea {i + 1} is not an object with text, expected_gain and parent_id")
        text_ = item.get("text")
        if not isinstance(text_, str) or not text_.strip():
            raise ParseError(f'idea {i + 1} has no "text" (a non-empty string)')
        gain = item.get("expected_gain", "")
        parent = item.get("parent_id")
        parent_id = None if parent is None or str(parent).strip().lower() in _NULL_IDS else str(parent).strip()
        if parent_id is not None and parent_id not in known_ids:
            parent_id = fallback
        ideas.append(
            {"text": text_.strip(), "expected_gain": "" if gain is None else str(gain).strip(), "parent_id": parent_id}
        )
    if len(ideas) < k:
        raise ParseError(f"expected {k} ideas, got {len(ideas)}")
    return ideas[:k]


# ------------------------------------------------------------------------------------------ coder


def parse_candidate(text: str) -> str:
    """The candidate file from a coder answer: a fenced python block with ModelNew that parses."""
    source = extract_code(text)
    try:
        ast.parse(source)
    except SyntaxError as exc:
        raise ParseError(f"the code block is not valid Python: line {exc.lineno}: {exc.msg}") from None
    return source


def implementation_note(idea: dict[str, Any]) -> str:
    """For an idea written several times (``RunConfig.implementations``), which one this is and what that asks."""
    params = idea.get("params") or {}
    v, n = params.get("implementation"), params.get("of")
    if not n or n < 2:
        return ""
    return (
        f"\n\nThis is implementation {v} of {n} of this idea, written in parallel by different engineers who do not "
        "see each other's code. "
        + (
            "Write the most direct implementation of it."
            if v == 1
            else "Take a different route from the most direct one (another parallel decomposition, tiling, vector "
            "width or order of the work), so that the implementations differ and the fastest can be kept."
        )
    )


def tools_section(tools: Sequence[BaseTool] | None, max_tool_rounds: int) -> str:
    """The coder prompt's paragraph on the tools it may call (empty without tools)."""
    if not tools:
        return ""
    lines = []
    for t in tools:
        first = str(t.description or "").strip().split(". ")[0].rstrip(".")
        lines.append(f"- `{t.name}`: {first}." if first else f"- `{t.name}`")
    text = render_prompt("coder_tools", max_tool_rounds=max_tool_rounds, tool_lines="\n".join(lines))
    return text.rstrip() + "\n\n"


class LLMCoder:
    """Turns one idea into a candidate source; with ``error`` set it repairs the previous attempt.

    For a repair, ``parent_source`` is the failed attempt's source and ``error`` its compile log or
    mismatch reason; otherwise ``parent_source`` is the parent candidate's source (None: the reference).
    With ``tools`` (``agents.llm_tools.make_tools``) the model may compile, check and time drafts
    before it answers (``ChatSession.ask_with_tools``, ``max_tool_rounds`` rounds of calls at most).
    """

    role = "coder"

    def __init__(
        self, session: ChatSession, *, max_reasks: int = 2, max_tool_rounds: int = 4, policy: str = "relaxed"
    ) -> None:
        self.session = session
        self.max_reasks = max_reasks
        self.max_tool_rounds = max_tool_rounds
        self.policy = policy  # the tolerance policy the system prompt states

    def prompts(
        self,
        problem_source: str,
        device: str,
        idea: dict[str, Any],
        parent_source: str | None,
        error: str | None,
        tools: Sequence[BaseTool] | None = None,
        baseline: dict[str, Any] | None = None,
        parent: dict[str, Any] | None = None,
    ) -> tuple[str, str]:
        common = {
            "problem_source": problem_source.rstrip("\n"),
            "hardware": sheet(device, baseline),
            "reference": reference_line(baseline),
            "idea_text": str(idea.get("text", "")).strip(),
            "tools_section": tools_section(tools, self.max_tool_rounds),
        }
        if error is not None:
            source = _clip_source(parent_source) if parent_source else "# (the previous attempt produced no file)"
            user = render_prompt("repair", **common, source=source, error=_clip_source(error.strip(), 8000))
        else:
            if parent_source:
                parent_id = idea.get("parent_id") or "the parent"
                section = (
                    f"Start from the parent candidate {parent_id}: keep what works, change what the idea says.\n"
                    f"{parent_record(parent)}\n```python\n{_clip_source(parent_source)}\n```"
                )
            else:
                section = "There is no parent candidate: start from the reference above."
            user = render_prompt(
                "coder",
                **common,
                expected_gain=str(idea.get("expected_gain", "")).strip() or "-",
                implementation=implementation_note(idea),
                parent_section=section,
            )
        return system_prompt(device, self.policy), user

    def write(
        self,
        problem_source: str,
        device: str,
        idea: dict[str, Any],
        parent_source: str | None,
        error: str | None,
        tools: Sequence[BaseTool] | None = None,
        baseline: dict[str, Any] | None = None,
        parent: dict[str, Any] | None = None,
    ) -> str:
        """The candidate's complete Python source. With ``tools`` the model may call them first; ``parent``: the
        parent candidate's record (how it did, its diagnosis, the critic's reason)."""
        system, user = self.prompts(problem_source, device, idea, parent_source, error, tools, baseline, parent)
        if tools:
            source, _ = self.session.ask_with_tools(
                self.role,
                system,
                user,
                tools=tools,
                parse=parse_candidate,
                max_tool_rounds=self.max_tool_rounds,
                max_reasks=self.max_reasks,
            )
        else:
            source, _ = self.session.ask(self.role, system, user, parse=parse_candidate, max_reasks=self.max_reasks)
        return source


# ----------------------------------------------------------------------------------------- critic


def parse_review(text: str, candidate_ids: set[str]) -> dict[str, Any]:
    """Validate the critic's JSON object; reasons for ids not under review are dropped."""
    data = extract_json(text)
    if not isinstance(data, dict):
        raise ParseError(f'expected a JSON object with "feedback", "stop" and "reasons", got a {type(data).__name__}')
    feedback = data.get("feedback")
    if not isinstance(feedback, str):
        raise ParseError('"feedback" must be a string')
    stop = data.get("stop", False)
    if isinstance(stop, str) and stop.strip().lower() in {"true", "false"}:
        stop = stop.strip().lower() == "true"
    if not isinstance(stop, bool):
        raise ParseError('"stop" must be true or false')
    reasons = data.get("reasons", {})
    if reasons is None:
        reasons = {}
    if not isinstance(reasons, dict):
        raise ParseError('"reasons" must be an object mapping candidate ids to one line each')
    kept = {str(k): str(v).strip() for k, v in reasons.items() if str(k) in candidate_ids and v is not None}
    return {"feedback": feedback.strip(), "stop": stop, "reasons": kept}


class LLMCritic:
    """Judges a round's candidates, writes feedback for the next round and says whether to stop."""

    role = "critic"

    def __init__(
        self, session: ChatSession, *, max_reasks: int = 2, device: str = "cuda", policy: str = "relaxed"
    ) -> None:
        self.session = session
        self.max_reasks = max_reasks
        self.device = device  # picks the toolchain rules of the system prompt
        self.policy = policy  # the tolerance policy it states

    def prompts(
        self,
        problem_source: str,
        candidates: list[dict[str, Any]],
        best: dict[str, Any] | None,
        round: int,
        rounds_left: int,
        baseline: dict[str, Any] | None = None,
    ) -> tuple[str, str]:
        blocks = []
        for c in candidates:
            origin = f"from {c['parent_id']}" if c.get("parent_id") else "from the reference"
            lines = [f"### {c.get('id', '?')} ({origin})", f"result: {result_line(c)}"]
            if c.get("idea"):
                lines.append(f"idea: {_clip(c['idea'])}")
            if c.get("diagnosis"):
                lines.append(f"diagnosis: {_clip(c['diagnosis'])}")
            if c.get("source"):
                lines.append(f"\n```python\n{_clip_source(c['source'])}\n```")
            blocks.append("\n".join(lines))
        user = render_prompt(
            "critic",
            problem_source=problem_source.rstrip("\n"),
            hardware=sheet(self.device, baseline),
            reference=reference_line(baseline),
            best_section=best_section(best, with_source=False),
            candidates="\n\n".join(blocks) if blocks else "(no candidates this round)",
            round=round,
            rounds_left=rounds_left,
        )
        return system_prompt(self.device, self.policy), user

    def review(
        self,
        problem_source: str,
        candidates: list[dict[str, Any]],
        best: dict[str, Any] | None,
        round: int,
        rounds_left: int,
        baseline: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """{"feedback": str, "stop": bool, "reasons": {candidate_id: str}}."""
        ids = {str(c["id"]) for c in candidates if c.get("id") is not None}
        system, user = self.prompts(problem_source, candidates, best, round, rounds_left, baseline)
        review, _ = self.session.ask(
            self.role, system, user, parse=lambda text: parse_review(text, ids), max_reasks=self.max_reasks
        )
        return review
