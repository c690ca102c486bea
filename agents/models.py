"""Which chat model a run uses: ``--model`` / ``--base-url`` → ``ModelSpec`` → a LangChain chat model.

API keys come from the environment only, and leave it when the first client is built (``tools.keys``):
the client gets its key as ``api_key``. Prices (dollars per million tokens) turn token counts into cost.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tools import keys
from tools.errors import ConfigError, EnvironmentProblem

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

Provider = Literal["builtin", "openai", "google_genai"]

# A key for OpenAI-compatible servers that do not check one (vLLM, Ollama, llama.cpp by default).
PLACEHOLDER_API_KEY = "not-needed"

# Hosted providers and the environment variables their keys come from (the first one set wins).
_KEY_VARS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "google_genai": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
}
_PROVIDER_ALIASES = {"openai": "openai", "google_genai": "google_genai", "google-genai": "google_genai"}


# ---------------------------------------------------------------------------------------- models


@dataclass(frozen=True)
class ModelSpec:
    """Which chat model a run uses. ``base_url`` (openai provider only): an OpenAI-compatible server."""

    provider: Provider
    name: str
    base_url: str | None = None

    @property
    def is_builtin(self) -> bool:
        return self.provider == "builtin"

    @property
    def label(self) -> str:
        """``builtin`` or ``provider:name``: what traces and ideas name as their author."""
        return "builtin" if self.is_builtin else f"{self.provider}:{self.name}"

    def __str__(self) -> str:
        return self.label if self.base_url is None else f"{self.label} at {self.base_url}"


def default_model() -> str:
    """``$KFORGE_MODEL`` when set, else ``builtin`` (the offline roles, so a run always works)."""
    return os.environ.get("KFORGE_MODEL", "").strip() or "builtin"


def _normalise_base_url(base_url: str) -> str:
    url = base_url.strip().rstrip("/")
    m = re.fullmatch(r"(https?)://([^/\s?#]+)(/[^\s?#]*)?", url)
    if not m:
        raise ConfigError(f"bad --base-url {base_url!r}: expected http(s)://host[:port]/v1")
    if not m.group(3):  # a bare server address: OpenAI-compatible servers serve the API under /v1
        url += "/v1"
    return url


def parse_model(spec: str, base_url: str | None = None) -> ModelSpec:
    """Parse ``builtin``, ``openai:<name>`` or ``google_genai:<name>``; ConfigError with one line otherwise.

    With ``base_url`` the model is served by an OpenAI-compatible server (vLLM, Ollama, llama.cpp) and
    goes through the openai provider: ``openai:<name>``, or just ``<name>``. A base URL without a path
    gets ``/v1`` appended.
    """
    text = (spec or "").strip()
    url = _normalise_base_url(base_url) if base_url and base_url.strip() else None
    if not text:
        raise ConfigError("empty --model: use builtin, openai:<model> or google_genai:<model>")
    if text.lower() == "builtin":
        if url:
            raise ConfigError("--base-url needs a served model: --model openai:<name> (or just <name>)")
        return ModelSpec("builtin", "builtin")
    provider_text, sep, name = text.partition(":")
    if url and (not sep or provider_text.strip().lower() not in _PROVIDER_ALIASES):
        # A bare model name on an OpenAI-compatible server (Ollama names have colons: llama3.1:8b).
        provider_text, sep, name = "openai", ":", text
    if not sep:
        raise ConfigError(
            f"--model {text!r} names no provider: use builtin, openai:{text}, google_genai:{text}, "
            f"or --base-url for an OpenAI-compatible server"
        )
    provider = _PROVIDER_ALIASES.get(provider_text.strip().lower())
    if provider is None:
        raise ConfigError(
            f"unsupported model provider {provider_text!r} in --model {text!r}: use openai:<model>, "
            f"google_genai:<model>, or openai:<model> with --base-url for an OpenAI-compatible server"
        )
    name = name.strip()
    if not name or re.search(r"\s", name):
        raise ConfigError(f"bad model name in --model {text!r}: expected {provider}:<model name>")
    if url and provider != "openai":
        raise ConfigError(
            f"--base-url works with the openai provider (OpenAI-compatible servers), not {provider}: "
            f"use --model openai:{name}"
        )
    return ModelSpec(provider, name, url)  # type: ignore[arg-type]


def _api_key(spec: ModelSpec) -> str:
    """The provider's key: taken out of the environment (every provider's, at once), then held in memory."""
    names = _KEY_VARS[spec.provider]
    for var in names:
        value = keys.get(var)
        if value:
            return value
    if spec.base_url:
        return PLACEHOLDER_API_KEY
    raise ConfigError(f"--model {spec.label} needs {names[0]} in the environment (no key is set)")


def make_chat_model(
    spec: ModelSpec, *, timeout_s: float, temperature: float | None = None, max_tokens: int | None = None
) -> BaseChatModel:
    """The LangChain chat model for ``spec``, via ``init_chat_model``. Keys come from the environment only,
    and are no longer there once this returns (``tools.keys``); the client gets its key explicitly.
    ``temperature`` and ``max_tokens`` (each answer's cap): None leaves the provider's default.

    The client's own retries are turned off: ``ChatSession`` retries, with backoff it logs and records.
    """
    if spec.is_builtin:
        raise ConfigError("the builtin model is the offline roles: it has no chat model")
    if timeout_s <= 0:
        raise ConfigError(f"the LLM timeout must be positive, got {timeout_s}")
    kwargs: dict[str, Any] = {"api_key": _api_key(spec), "timeout": timeout_s, "max_retries": 0}
    if temperature is not None:
        kwargs["temperature"] = temperature
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    if spec.provider == "openai":
        # Token usage also when a caller streams (LangGraph's "messages" stream mode does).
        kwargs["stream_usage"] = True
        if spec.base_url:
            # OpenAI-compatible servers speak Chat Completions, not the Responses API.
            kwargs.update(base_url=spec.base_url, use_responses_api=False)
    try:
        from langchain.chat_models import init_chat_model

        return init_chat_model(spec.name, model_provider=spec.provider, **kwargs)
    except ImportError as exc:
        package = "langchain-openai" if spec.provider == "openai" else "langchain-google-genai"
        raise EnvironmentProblem(f"--model {spec.label} needs the {package} package ({exc})") from exc
    except (ValueError, TypeError) as exc:  # pydantic validation of the provider's settings
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot set up --model {spec.label}: {first}") from exc


# ----------------------------------------------------------------------------------------- prices

# US dollars per million (input, output) tokens of hosted models, matched by longest name prefix.
# List prices at the time of writing; a model not listed here costs 0 and is flagged priced=False.
PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "o1": (15.00, 60.00),
    "o1-mini": (1.10, 4.40),
    "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o3-pro": (20.00, 80.00),
    "o4-mini": (1.10, 4.40),
    "gemini-2.0-flash": (0.10, 0.40),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.5-pro": (1.25, 10.00),
}


def price_for(model_name: str, prices: dict[str, tuple[float, float]] | None = None) -> tuple[float, float] | None:
    """(input, output) dollars per million tokens for a model name, or None when unknown."""
    table = PRICES_PER_MTOK if prices is None else prices
    name = model_name.strip().lower().removeprefix("models/")
    best = max((key for key in table if name == key or name.startswith(key + "-")), key=len, default=None)
    return table[best] if best is not None else None
