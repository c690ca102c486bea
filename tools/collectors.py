"""Items gathered by whatever runs inside a block, per thread of work.

A graph runs parallel branches (one coder per idea) in threads of their own, each with its own copy of the context;
a ``Collector`` hands every ``collecting()`` block a list of its own, and ``add`` puts an item in the innermost list
open in the caller's context, so a branch or a tool call gathers its own items and no other's.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Collector(Generic[T]):
    def __init__(self, name: str) -> None:
        self._open: contextvars.ContextVar[list[T] | None] = contextvars.ContextVar(name, default=None)

    @contextlib.contextmanager
    def collecting(self) -> Iterator[list[T]]:
        """A new list, filled by ``add`` while the block runs in this context."""
        items: list[T] = []
        token = self._open.set(items)
        try:
            yield items
        finally:
            self._open.reset(token)

    def add(self, item: T) -> None:
        """Into the list of the block open here, if any (outside every block the item is nobody's to gather)."""
        items = self._open.get()
        if items is not None:
            items.append(item)
