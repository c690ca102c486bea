"""Small helpers shared by the template modules: placeholder filling and number formatting."""

from __future__ import annotations

import re
import textwrap
from typing import Any

_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def fill(text: str, **values: Any) -> str:
    """Replace every ``@NAME@`` in ``text`` by ``str(values[NAME])``; every placeholder must be given."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise KeyError(f"template placeholder @{name}@ has no value")
        return str(values[name])

    return _PLACEHOLDER.sub(one, text)


def c_float(x: float) -> str:
    """A C float literal that round-trips ``x`` (``1e-05f``)."""
    text = repr(float(x))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"


def c_bool(flag: bool) -> str:
    return "1" if flag else "0"


def wrap(text: str, prefix: str = "", width: int = 100) -> str:
    """``text`` wrapped to ``width`` columns, every line starting with ``prefix``."""
    return "\n".join(prefix + line for line in textwrap.wrap(text, width - len(prefix), break_on_hyphens=False))
