"""Prompts in, answers out: render the prompt templates, and parse what a model says back.

Kernel source always comes back in a fenced code block (``extract_code``), small metadata as JSON
(``extract_json``); an answer of the wrong form raises ``ParseError``, whose message the model is shown.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tools.errors import ConfigError, KernelforgeError

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"


class ParseError(KernelforgeError):
    """A model answer that does not have the required form. The message is what the model is told."""

    def __init__(self, message: str, answer: str = "") -> None:
        super().__init__(message)
        self.answer = answer


# ----------------------------------------------------------------------------------------- prompts


def render_prompt(name: str, **values: Any) -> str:
    """Render ``agents/prompts/<name>.md`` with ``string.Template`` (every placeholder must be given)."""
    path = PROMPTS_DIR / f"{name}.md"
    try:
        template = string.Template(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no prompt template {name!r} in {PROMPTS_DIR}") from None
    try:
        return template.substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise ConfigError(f"prompt {name!r} needs a value for ${exc.args[0]}") from None


# ----------------------------------------------------------------------------------------- parsers

# An opening fence with an optional info string, the body, and the closing fence on its own line.
_FENCE = re.compile(r"^[ \t]{0,3}```[ \t]*([^\n`]*)\n(.*?)^[ \t]{0,3}```[ \t]*$", re.MULTILINE | re.DOTALL)
_PY_LABELS = {"", "python", "py", "python3"}
_MODELNEW = re.compile(r"^class[ \t]+ModelNew\b", re.MULTILINE)


def _fenced_blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language label, body) of each closed fenced block, in order."""
    for m in _FENCE.finditer(text):
        label = m.group(1).strip().split()[0].lower() if m.group(1).strip() else ""
        yield label, m.group(2)


def extract_code(text: str) -> str:
    """The candidate source: the last fenced ```python (```py, unlabeled) block that defines ModelNew."""
    blocks = [body for label, body in _fenced_blocks(text) if label in _PY_LABELS]
    if not blocks:
        if re.search(r"^[ \t]{0,3}```", text, re.MULTILINE):
            unclosed = text.count("```") % 2 == 1
            hint = " (a ``` fence was opened but never closed: was the answer cut off?)" if unclosed else ""
            raise ParseError(f"no fenced ```python code block found{hint}; put the whole file in one ```python block")
        raise ParseError("no fenced code block found; put the whole candidate file in one ```python block")
    for body in reversed(blocks):
        if _MODELNEW.search(body):
            return body.strip("\n") + "\n"
    raise ParseError("the ```python block defines no `class ModelNew(nn.Module)` at top level")


def extract_json(text: str) -> Any:
    """A fenced ```json block (the last one), or a bare JSON value; ParseError otherwise."""
    blocks = list(_fenced_blocks(text))
    labelled = [body for label, body in blocks if label in {"json", "jsonc", "json5"}]
    for body in reversed(labelled):
        try:
            return json.loads(body)
        except json.JSONDecodeError as exc:
            raise ParseError(f"the ```json block is not valid JSON: {exc}") from None
    try:
        return json.loads(text.strip())
    except json.JSONDecodeError:
        pass
    for label, body in reversed(blocks):  # an unlabeled fence holding JSON
        if label == "":
            try:
                return json.loads(body)
            except json.JSONDecodeError:
                continue
    # A JSON object or list after a sentence of prose: decode from the first bracket that parses.
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[\[{]", text):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict | list):
            return value
    raise ParseError("no JSON found; answer with one fenced ```json block")
