"""Fakes for LLM tests: a tiny OpenAI-compatible HTTP server and a scripted LangChain chat model.

``FakeOpenAIServer`` serves ``POST /v1/chat/completions`` (plain JSON, or server-sent events when the
request streams) from a queue of canned assistant texts, each with a ``usage`` block, on 127.0.0.1 at a
free port. An answer may be cut off (``finish_reason="length"``) or call a tool with arguments sent as
given, valid JSON or not (``tool_call``). With ``api_key`` it answers 401, as OpenAI does, to a request
without that key. Errors can be queued too (``error(429)``), so retries can be tested through the real
``langchain-openai`` client. Every request body is kept in ``requests``::

    with FakeOpenAIServer() as server:
        server.error(429).reply("```json\\n[]\\n```", prompt_tokens=10, completion_tokens=5)
        model = make_chat_model(parse_model("openai:test-model", base_url=server.url), timeout_s=5)

``ScriptedChatModel`` is ``GenericFakeChatModel`` with ``bind_tools`` (returning itself) and a record
of the messages of every call in ``seen``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from pydantic import Field


@dataclass
class Reply:
    """One canned answer (status 200) or error (any other status)."""

    text: str = ""
    status: int = 200
    prompt_tokens: int | None = None  # None: prompt characters / 4
    completion_tokens: int | None = None  # None: answer characters / 4
    delay_s: float = 0.0  # wait before answering (for client timeouts)
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"  # "length": an answer cut off at its token limit
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments as sent: maybe not JSON)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            models = [{"id": name, "object": "model", "owned_by": "fake"} for name in self.server.fake.models]
            self._send_json(200, {"object": "list", "data": models})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        fake = self.server.fake
        if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            # What OpenAI answers to a wrong or missing key; the queue is left as it was.
            error = {
                "message": "Incorrect API key provided",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
            self._send_json(401, {"error": error})
            return
        reply = fake._take(body, {k.lower(): v for k, v in self.headers.items()})
        if reply is None:
            message = "fake server: no canned reply left"
            self._send_json(400, {"error": {"message": message, "type": "invalid_request_error"}})
            return
        if reply.delay_s:
            time.sleep(reply.delay_s)
        try:
            if reply.status != 200:
                error = {"message": reply.text or f"fake error {reply.status}", "type": "fake_error", "code": None}
                self._send_json(reply.status, {"error": error}, reply.headers)
            elif body.get("stream"):
                self._stream(body, reply)
            else:
                done = _completion(body, reply)
                fake.counted(body, done["usage"])
                self._send_json(200, done, reply.headers)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            pass

    def _stream(self, body: dict[str, Any], reply: Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        done = _completion(body, reply)
        self.server.fake.counted(body, done["usage"])
        base = {"id": done["id"], "object": "chat.completion.chunk", "created": done["created"], "model": done["model"]}
        choice = done["choices"][0]
        delta: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if "tool_calls" in choice["message"]:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(choice["message"]["tool_calls"])]
        chunks = [
            {**base, "choices": [{"index": 0, "delta": delta}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": done["usage"]})
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeOpenAIServer


def _prompt_chars(body: dict[str, Any]) -> int:
    total = 0
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(part.get("text", "")) for part in content if isinstance(part, dict))
    return total


def _completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else _prompt_chars(body) // 4
    completion_tokens = reply.completion_tokens if reply.completion_tokens is not None else len(reply.text) // 4
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}_{uuid.uuid4().hex[:6]}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else reply.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class FakeOpenAIServer:
    """An OpenAI-compatible chat server on 127.0.0.1 answering from a queue (see the module doc)."""

    def __init__(
        self,
        replies: Iterable[str | Reply] = (),
        *,
        models: Sequence[str] = ("test-model",),
        api_key: str | None = None,
    ) -> None:
        self.models = list(models)
        self.api_key = api_key  # set: a chat request without ``Authorization: Bearer <api_key>`` gets a 401
        self.requests: list[dict[str, Any]] = []  # every chat request body, in order
        self.headers: list[dict[str, str]] = []  # and its headers, names in lower case
        # Every answer sent, in order: its usage block and the first line of the request's last message.
        self.usage: list[dict[str, Any]] = []
        self._queue: deque[Reply] = deque(Reply(r) if isinstance(r, str) else r for r in replies)
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def counted(self, body: dict[str, Any], usage: dict[str, int]) -> None:
        """Keep what the server billed for an answer as it is sent, with the request it answered."""
        messages = body.get("messages") or [{}]
        content = messages[-1].get("content")
        first = content.strip().splitlines()[0] if isinstance(content, str) and content.strip() else ""
        with self._lock:
            self.usage.append({**usage, "request": first})

    # -- queue

    def reply(
        self,
        text: str,
        *,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        delay_s: float = 0.0,
        finish_reason: str = "stop",
    ) -> FakeOpenAIServer:
        """Queue an assistant answer (``finish_reason="length"``: one cut off at its token limit)."""
        with self._lock:
            self._queue.append(
                Reply(
                    text,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    delay_s=delay_s,
                    finish_reason=finish_reason,
                )
            )
        return self

    def tool_call(
        self, name: str, arguments: str, *, prompt_tokens: int | None = None, completion_tokens: int | None = None
    ) -> FakeOpenAIServer:
        """Queue an answer that calls tool ``name`` with ``arguments`` sent as they are (JSON or not)."""
        with self._lock:
            reply = Reply("", prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
            reply.tool_calls.append((name, arguments))
            self._queue.append(reply)
        return self

    def error(self, status: int = 429, message: str = "", *, retry_after: float | None = None) -> FakeOpenAIServer:
        """Queue an HTTP error (429 rate limit by default), optionally with a Retry-After header."""
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
        with self._lock:
            self._queue.append(Reply(message, status=status, headers=headers))
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def _take(self, body: dict[str, Any], headers: dict[str, str]) -> Reply | None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self._queue.popleft() if self._queue else None

    # -- life cycle

    @property
    def url(self) -> str:
        """The base URL for clients: ``http://127.0.0.1:<port>/v1``."""
        if self._server is None:
            raise RuntimeError("the fake server is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeOpenAIServer:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model answering from ``messages`` (an iterator of str or AIMessage, usage included).

    ``seen`` holds the messages of every call, so tests can assert on prompts and re-asks.
    """

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self
