"""The builtin offline team's catalog: recognise a problem's family, propose ideas, render candidates.

With no LLM configured, the builtin planner calls ``propose`` for each round's ideas and the builtin
coder calls ``render`` to turn one into a candidate file; both work from the template catalog here.

- ``recognise(info)``: "softmax", "layernorm", "matmul", "reduce" or None (``recognise.py``; reductions and
  RMSNorm in ``recognise_reduce.py``), or "elementwise" / "epilogue" for pointwise chains (``pointwise.py``).
- ``propose(info, device, k, tried, parent, policy)``: up to k new ``IdeaSpec``s, deterministic (``search.py``).
- ``render(template, params, device)``: the full source of a candidate defining ``ModelNew``
  (``catalog.py``, ``catalog_elementwise.py``, ``catalog_reduce.py``; the kernels in ``templates_*.py``, a
  module per family and device or per kernel design; ``templates_cpu.py`` holds what the CPU ones share).
"""

from __future__ import annotations

from agents.builtin.catalog import TEMPLATES, describe, render, templates_for
from agents.builtin.recognise import FAMILIES, analyse, recognise
from agents.builtin.search import IdeaSpec, propose
from agents.builtin.shape import Shape

__all__ = [
    "FAMILIES",
    "TEMPLATES",
    "IdeaSpec",
    "Shape",
    "analyse",
    "describe",
    "propose",
    "recognise",
    "render",
    "templates_for",
]
