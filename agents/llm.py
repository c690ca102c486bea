"""One chat session per run: retries, re-asks, the token and dollar budget, and a record of every call.

A ``ChatSession`` wraps the chat model ``agents.models.make_chat_model`` builds: it retries transient
failures (timeouts, HTTP 429 and 5xx) with exponential backoff, re-asks when an answer cannot be parsed
(``agents.answers``), enforces the run's token and dollar budget, and keeps a ``CallRecord`` of every
model call (tokens, cost, seconds, attempts). ``ask_with_tools`` lets the model call LangChain tools
(``agents.llm_tools``) before its final answer; each tool call is kept on the record of the model
call that requested it.
"""

from __future__ import annotations

import email.utils
import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import structlog

from agents.answers import ParseError, render_prompt
from agents.models import ModelSpec, make_chat_model, price_for
from tools.collectors import Collector
from tools.errors import ConfigError, KernelforgeError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage, ToolMessage
    from langchain_core.tools import BaseTool

log = structlog.get_logger(__name__)

T = TypeVar("T")

TOOL_ARG_CHARS = 200  # each tool-call argument is kept this long on a CallRecord
TOOL_RESULT_CHARS = 2000  # and each tool result this long (the model gets up to MAX_TOOL_MESSAGE_CHARS)
MAX_TOOL_MESSAGE_CHARS = 16_000  # a tool result longer than this is cut before the model sees it

# The calls of one graph node, wherever it runs: parallel branches each gather their own (``ChatSession.recording``).
_node_calls: Collector[CallRecord] = Collector("node_calls")


class BudgetExceeded(KernelforgeError):
    """The run's token or dollar budget is spent; raised before a call that would start beyond it."""

    def __init__(self, message: str, *, kind: Literal["tokens", "dollars"], used: float, limit: float) -> None:
        super().__init__(message)
        self.kind = kind
        self.used = used
        self.limit = limit


class LLMError(KernelforgeError):
    """A model call failed for good: a non-transient error, or transient ones past the last attempt."""

    exit_code = 3

    def __init__(self, message: str, *, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


# ------------------------------------------------------------------------------------------ session


@dataclass
class CallRecord:
    """One model call: what was sent (size), what came back, what it cost."""

    role: str
    model: str
    prompt_chars: int  # all messages sent, system included
    prompt: str  # the last user message of the call (the re-ask text for a re-ask)
    answer: str
    input_tokens: int
    output_tokens: int
    usage_reported: bool  # False: the server sent no usage; tokens estimated as chars / 4
    dollars: float
    priced: bool  # False: no price known for this model (cost counted as 0)
    seconds: float  # wall time, retries and backoff included
    attempts: int  # requests sent: 1 + retries
    reask: int = 0  # 0 for the first ask, n for the n-th re-ask after a parse error
    ok: bool = True
    error: str | None = None  # the parse error or the call failure
    started_at: float = field(default_factory=time.time)
    # The tools this answer asked for, in order, once run: {"id", "name", "args" (each value clipped),
    # "result" (clipped), "ok", "seconds" (wall time), "job_s" (the sandbox jobs' own time, no waiting for a turn)}.
    # Empty for a plain answer.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None  # the server's: "length" means the answer was cut off at its token limit

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def summary(self) -> dict[str, Any]:
        """The record without the prompt and answer texts, for logs and events."""
        out = asdict(self)
        del out["prompt"], out["answer"]
        out["answer_chars"] = len(self.answer)
        out["tool_calls"] = [t.get("name") for t in self.tool_calls]
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_AUTO: Any = object()
_CONNECTION_NAMES = ("ConnectError", "ConnectionError", "RemoteProtocolError")


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if status is None and type(exc).__module__.startswith("google"):
        status = getattr(exc, "code", None)
    return status if isinstance(status, int) else None


def transient_reason(exc: BaseException) -> str | None:
    """Why a failed call is worth retrying (a timeout, HTTP 429/5xx, a dropped connection), else None."""
    from langchain_core.exceptions import ModelError

    for e in _causes(exc):
        status = _status(e)
        if status is not None:
            return f"HTTP {status}" if status in (408, 429) or 500 <= status < 600 else None
        if isinstance(e, ModelError):
            return type(e).__name__ if e.is_retryable else None
        names = [k.__name__ for k in type(e).__mro__]
        if isinstance(e, TimeoutError) or any("Timeout" in n for n in names):
            return "timeout"
        if any(marker in n for n in names for marker in _CONNECTION_NAMES):
            return "connection"
    return None


def _retry_after_s(exc: BaseException) -> float | None:
    """The server's Retry-After (seconds or an HTTP date), when the error carries a response."""
    for e in _causes(exc):
        headers = getattr(getattr(e, "response", None), "headers", None)
        if not headers:
            continue
        value = headers.get("retry-after-ms")
        if value is not None:
            try:
                return float(value) / 1000.0
            except ValueError:
                pass
        value = headers.get("retry-after")
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None
    return None


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:limit]}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + f"… ({len(text)} chars)"


def _summarize_args(args: Any) -> dict[str, str] | str:
    """A tool call's arguments for the record: each value as text, long ones cut (with their length)."""
    if not isinstance(args, dict):
        return _clip(str(args), TOOL_ARG_CHARS)
    out = {}
    for key, value in args.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out[str(key)] = _clip(text, TOOL_ARG_CHARS)
    return out


def _requested_calls(message: Any) -> list[dict[str, Any]]:
    """The tool calls an AI message asks for, the ones whose arguments did not parse included
    (``invalid`` holds why): each needs an answer before the model is asked again."""
    calls = [
        {"id": c.get("id"), "name": c.get("name"), "args": c.get("args")}
        for c in getattr(message, "tool_calls", None) or []
    ]
    for c in getattr(message, "invalid_tool_calls", None) or []:
        calls.append(
            {"id": c.get("id"), "name": c.get("name"), "args": c.get("args"), "invalid": c.get("error") or "not JSON"}
        )
    return calls


def _calls_chars(message: Any) -> int:
    """The size of the tool calls a message carries (their arguments hold whole candidate files)."""
    return sum(len(json.dumps(c, default=str)) for c in _requested_calls(message))


def _prompt_of(messages: list[BaseMessage]) -> str:
    """What a call's record shows as its prompt: the last message, or for a call that follows tool
    results (which the record of the call that asked for them holds), which tools answered."""
    names = []
    for m in reversed(messages):
        if m.type != "tool":
            break
        names.append(getattr(m, "name", None) or "tool")
    if names:
        return f"(the results of {len(names)} tool call(s): {', '.join(reversed(names))})"
    return messages[-1].text


class ChatSession:
    """One chat model for one run, shared by the LLM roles (and by the coder's parallel branches).

    ``ask`` sends a system and a user message, retries transient failures with exponential backoff
    (``max_attempts`` requests at most, ``sleep`` injectable), re-asks with the parse error when
    ``parse`` raises ParseError, and appends a ``CallRecord`` per model call to ``calls``. Before each
    call the budget is checked: BudgetExceeded when the tokens or dollars already spent reach
    ``max_tokens`` / ``max_dollars``. ``spent_tokens`` / ``spent_dollars`` carry a resumed run's spending.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        model_name: str | None = None,
        price: tuple[float, float] | None = _AUTO,
        max_tokens: int | None = None,
        max_dollars: float | None = None,
        spent_tokens: int = 0,
        spent_dollars: float = 0.0,
        max_attempts: int = 4,
        backoff_s: float = 2.0,
        max_backoff_s: float = 60.0,
        jitter: float = 0.25,
        sleep: Callable[[float], None] = time.sleep,
        on_call: Callable[[CallRecord], None] | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {max_attempts}")
        self.model = model
        self.model_name = model_name or str(
            getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__
        )
        self.price = price_for(self.model_name) if price is _AUTO else price
        self.max_tokens = max_tokens
        self.max_dollars = max_dollars
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.jitter = jitter
        self.sleep = sleep
        self.on_call = on_call
        self.calls: list[CallRecord] = []
        self._spent_tokens = spent_tokens
        self._spent_dollars = spent_dollars
        self._lock = threading.Lock()

    @classmethod
    def from_spec(
        cls,
        spec: ModelSpec,
        *,
        timeout_s: float,
        temperature: float | None = None,
        max_tokens_per_call: int | None = None,
        **kwargs: Any,
    ) -> ChatSession:
        """A session on ``make_chat_model(spec)``. ``price`` (dollars per million input and output tokens), where
        not given: the model's list price; a model behind a base URL has none (it costs 0, unpriced)."""
        kwargs.setdefault("model_name", spec.label)
        if kwargs.get("price") is None:
            kwargs["price"] = None if spec.base_url else price_for(spec.name)
        model = make_chat_model(spec, timeout_s=timeout_s, temperature=temperature, max_tokens=max_tokens_per_call)
        return cls(model, **kwargs)

    def recording(self) -> AbstractContextManager[list[CallRecord]]:
        """The calls made inside the block by this thread of work alone, in order: a graph node's own calls while
        parallel branches call the same session (``self.calls`` holds every call of the run)."""
        return _node_calls.collecting()

    # -- totals

    @property
    def total_tokens(self) -> int:
        with self._lock:
            return self._spent_tokens

    @property
    def total_dollars(self) -> float:
        with self._lock:
            return self._spent_dollars

    def usage_by_role(self) -> dict[str, dict[str, float]]:
        """Per role: calls, input/output tokens, dollars, seconds (the shape of the run state's usage)."""
        out: dict[str, dict[str, float]] = {}
        with self._lock:
            records = list(self.calls)
        for r in records:
            u = out.setdefault(
                r.role, {"calls": 0, "input_tokens": 0, "output_tokens": 0, "dollars": 0.0, "seconds": 0.0}
            )
            u["calls"] += 1
            u["input_tokens"] += r.input_tokens
            u["output_tokens"] += r.output_tokens
            u["dollars"] += r.dollars
            u["seconds"] += r.seconds
        return out

    def check_budget(self) -> None:
        """Raise BudgetExceeded when the tokens or dollars spent have reached their cap."""
        with self._lock:
            tokens, dollars = self._spent_tokens, self._spent_dollars
        if self.max_tokens is not None and tokens >= self.max_tokens:
            raise BudgetExceeded(
                f"token budget spent: {tokens} of {self.max_tokens}", kind="tokens", used=tokens, limit=self.max_tokens
            )
        if self.max_dollars is not None and dollars >= self.max_dollars:
            raise BudgetExceeded(
                f"dollar budget spent: ${dollars:.4f} of ${self.max_dollars:.4f}",
                kind="dollars",
                used=dollars,
                limit=self.max_dollars,
            )

    # -- calls

    def ask(
        self, role: str, system: str, user: str, *, parse: Callable[[str], T], max_reasks: int = 2
    ) -> tuple[T, CallRecord]:
        """Ask, parse, re-ask on a ParseError (``max_reasks`` times), and return the parsed value.

        Raises BudgetExceeded before a call beyond the budget, LLMError when a call fails for good, and
        ParseError when the last answer still cannot be parsed.
        """
        return self._converse(role, system, user, parse=parse, max_reasks=max_reasks)

    def ask_with_tools(
        self,
        role: str,
        system: str,
        user: str,
        *,
        tools: Sequence[BaseTool],
        parse: Callable[[str], T],
        max_tool_rounds: int = 4,
        max_reasks: int = 2,
    ) -> tuple[T, CallRecord]:
        """Like ``ask``, but the model may call ``tools`` before it answers.

        While an answer carries tool calls (at most ``max_tool_rounds`` such answers), each call is run
        by name with its arguments, its result goes back as a ``ToolMessage`` and the model is asked
        again; an unknown tool, arguments that do not validate or a tool that raises become an error
        ``ToolMessage``, never an exception here. Tool calls past the limit are not run: the model is
        told to answer, and an answer that still does not parse counts as a re-ask. The final plain
        answer goes through ``parse`` with ``ask``'s re-asks. One CallRecord per model call; the tool
        calls an answer asked for are on its record (``tool_calls``).
        """
        if not tools:
            return self.ask(role, system, user, parse=parse, max_reasks=max_reasks)
        by_name = {t.name: t for t in tools}
        try:
            model = self.model.bind_tools(list(tools))
        except NotImplementedError:  # a model without tool calling still answers in text
            log.bind(role=role, model=self.model_name).warning("llm_tools_unsupported", tools=sorted(by_name))
            model = self.model
        return self._converse(
            role,
            system,
            user,
            parse=parse,
            max_reasks=max_reasks,
            model=model,
            tools=by_name,
            max_tool_rounds=max_tool_rounds,
        )

    def _converse(
        self,
        role: str,
        system: str,
        user: str,
        *,
        parse: Callable[[str], T],
        max_reasks: int,
        model: Any = None,
        tools: dict[str, BaseTool] | None = None,
        max_tool_rounds: int = 0,
    ) -> tuple[T, CallRecord]:
        """The conversation behind ``ask`` and ``ask_with_tools``: call, run requested tools, parse,
        re-ask on a ParseError; one CallRecord per model call."""
        from langchain_core.messages import HumanMessage, SystemMessage

        bound = log.bind(role=role, model=self.model_name)
        by_name = tools or {}
        messages: list[BaseMessage] = [SystemMessage(content=system), HumanMessage(content=user)]
        reask = rounds = 0
        while True:
            self.check_budget()
            record, reply = self._invoke(role, messages, reask, bound, model=model)
            requested = _requested_calls(reply) if by_name else []
            if requested and rounds < max_tool_rounds:
                rounds += 1
                ran = [self._run_tool(call, by_name, bound) for call in requested]
                record.tool_calls = [entry for entry, _ in ran]
                self._finish(record, bound)
                messages += [reply, *(tool_message for _, tool_message in ran)]
                continue
            # Calls past the limit are answered, not run, so that the conversation stays well formed.
            refused = [self._refuse_tool(call, max_tool_rounds) for call in requested]
            record.tool_calls = [entry for entry, _ in refused]
            try:
                value = parse(record.answer)
            except ParseError as exc:
                why = str(exc)
                if record.finish_reason == "length":  # say why, so that the next answer is made to fit
                    why += "; the answer was cut off at its token limit: give the file alone, without prose"
                record.ok, record.error = False, f"parse: {why}"
                self._finish(record, bound)
                if reask >= max_reasks:
                    raise ParseError(
                        f"{role}: no usable answer after {reask + 1} tries: {why}", answer=record.answer
                    ) from exc
                messages += [reply, *(m for _, m in refused), HumanMessage(content=render_prompt("reask", error=why))]
                reask += 1
                continue
            except Exception as exc:  # a parser bug: the call still spent tokens, so record it
                record.ok, record.error = False, f"parser raised {_one_line(exc)}"
                self._finish(record, bound)
                raise
            self._finish(record, bound)
            return value, record

    @staticmethod
    def _run_tool(call: dict[str, Any], by_name: dict[str, BaseTool], bound: Any) -> tuple[dict[str, Any], ToolMessage]:
        """Run one requested tool call; every failure becomes an error result for the model."""
        from langchain_core.messages import ToolMessage

        from agents.llm_tools import jobs_of_the_call

        name, args = str(call.get("name") or ""), call.get("args")
        started = time.perf_counter()
        ok = False
        jobs: list[float] = []
        if call.get("invalid"):
            text = f"error: the arguments of {name!r} could not be read: {call['invalid']}"
        elif name not in by_name:
            text = f"error: there is no tool {name!r}; the tools are: {', '.join(sorted(by_name))}"
        else:
            try:
                with jobs_of_the_call() as jobs:
                    out = by_name[name].invoke(args if isinstance(args, dict) else {})
                text = out if isinstance(out, str) else json.dumps(out, default=str)
                ok = True
            except Exception as exc:  # a tool's failure is the model's to read, not the run's to die of
                text = f"error: {name} failed: {_one_line(exc, 2000)}"
        seconds = time.perf_counter() - started
        (bound.info if ok else bound.warning)("llm_tool_call", tool=name, ok=ok, seconds=round(seconds, 3))
        entry = {
            "id": call.get("id"),
            "name": name,
            "args": _summarize_args(args),
            "result": _clip(text, TOOL_RESULT_CHARS),
            "ok": ok,
            "seconds": seconds,
            "job_s": sum(jobs),
        }
        message = ToolMessage(
            content=_clip(text, MAX_TOOL_MESSAGE_CHARS),
            tool_call_id=str(call.get("id") or f"call_{name}"),
            name=name or "unknown",
            status="success" if ok else "error",
        )
        return entry, message

    @staticmethod
    def _refuse_tool(call: dict[str, Any], max_tool_rounds: int) -> tuple[dict[str, Any], ToolMessage]:
        from langchain_core.messages import ToolMessage

        name = str(call.get("name") or "")
        text = (
            f"not run: the limit of {max_tool_rounds} rounds of tool calls is reached. "
            "Answer now, without tool calls, in the form the task asks for."
        )
        entry = {"id": call.get("id"), "name": name, "args": _summarize_args(call.get("args")), "result": text}
        entry.update(ok=False, seconds=0.0)
        message = ToolMessage(
            content=text, tool_call_id=str(call.get("id") or f"call_{name}"), name=name or "unknown", status="error"
        )
        return entry, message

    def _invoke(
        self, role: str, messages: list[BaseMessage], reask: int, bound: Any, model: Any = None
    ) -> tuple[CallRecord, BaseMessage]:
        """One model call (``model``: the session's, or a tool-bound one), retried; its record, unfinished,
        and the message that came back. A call that fails for good is recorded and raises LLMError."""
        model = self.model if model is None else model
        prompt_chars = sum(len(m.text) + _calls_chars(m) for m in messages)
        prompt = _prompt_of(messages)
        started, wall = time.time(), time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            try:
                message = model.invoke(messages)
                break
            except Exception as exc:
                reason = transient_reason(exc)
                if reason is None or attempt >= self.max_attempts:
                    why = f"gave up after {attempt} attempts" if reason else "failed"
                    record = CallRecord(
                        role=role,
                        model=self.model_name,
                        prompt_chars=prompt_chars,
                        prompt=prompt,
                        answer="",
                        input_tokens=0,
                        output_tokens=0,
                        usage_reported=False,
                        dollars=0.0,
                        priced=self.price is not None,
                        seconds=time.perf_counter() - wall,
                        attempts=attempt,
                        reask=reask,
                        ok=False,
                        error=_one_line(exc),
                        started_at=started,
                    )
                    self._finish(record, bound)
                    raise LLMError(f"{role}: the model call {why}: {_one_line(exc)}", attempts=attempt) from exc
                delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
                delay *= 1.0 + self.jitter * random.random()
                after = _retry_after_s(exc)
                if after is not None:
                    delay = max(delay, min(after, self.max_backoff_s))
                bound.warning(
                    "llm_retry", attempt=attempt, reason=reason, delay_s=round(delay, 3), error=_one_line(exc)
                )
                self.sleep(delay)

        answer = message.text if hasattr(message, "text") else str(message.content)
        usage = getattr(message, "usage_metadata", None) or {}
        if usage:
            input_tokens, output_tokens = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
        else:  # no usage from the server: a rough count keeps the budget meaningful
            input_tokens, output_tokens = -(-prompt_chars // 4), -(-(len(answer) + _calls_chars(message)) // 4)
        dollars = 0.0
        if self.price is not None:
            dollars = (input_tokens * self.price[0] + output_tokens * self.price[1]) / 1e6
        return CallRecord(
            role=role,
            model=self.model_name,
            prompt_chars=prompt_chars,
            prompt=prompt,
            answer=answer,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            usage_reported=bool(usage),
            dollars=dollars,
            priced=self.price is not None,
            seconds=time.perf_counter() - wall,
            attempts=attempt,
            reask=reask,
            started_at=started,
            finish_reason=(getattr(message, "response_metadata", None) or {}).get("finish_reason"),
        ), message

    def _finish(self, record: CallRecord, bound: Any) -> None:
        with self._lock:
            self.calls.append(record)
            self._spent_tokens += record.tokens
            self._spent_dollars += record.dollars
        _node_calls.add(record)
        event = "llm_call" if record.ok else "llm_call_failed"
        (bound.info if record.ok else bound.warning)(event, **record.summary())
        if self.on_call is not None:
            self.on_call(record)
