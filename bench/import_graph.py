"""The project's import graph: file cycles, folder cycles and imports that point up the layers.

Every ``import`` and ``from ... import`` of the packages (``tools``, ``sandbox``, ``agents``, ``graphs``) is an
edge, at module level or inside a function alike: a lazy import still ties its module to the other. A file cycle is
a strongly connected set of modules; a folder cycle is two folders importing each other. The layers, bottom up:
``tools`` (records and the measurement harness), ``sandbox``, ``agents``, ``graphs`` (the graph and the
application); an edge from a lower folder to a higher one points up.

    python bench/import_graph.py          # the figures, and every upward edge
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("tools", "sandbox", "agents", "graphs")  # bottom up


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def edges(found: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of the project's modules (a name imported from a package counts as its module where
    one is so named, else as the package)."""

    def resolve(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    out: dict[str, set[str]] = {m: set() for m in found}
    for module, path in found.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                names = [
                    f"{base}.{a.name}" if resolve(f"{base}.{a.name}") != resolve(base) else base for a in node.names
                ]
            for name in names:
                target = resolve(name)
                if target and target != module:
                    out[module].add(target)
    return out


def file_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    cycles.append(sorted(members))
    return sorted(cycles)


def folder(module: str) -> str:
    return module.split(".")[0]


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every edge from a folder to a higher one in ``LAYERS``."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    return sorted((a, b) for a, bs in graph.items() for b in bs if rank[folder(b)] > rank[folder(a)])


def folder_cycles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    pairs = {(folder(a), folder(b)) for a, bs in graph.items() for b in bs if folder(a) != folder(b)}
    return sorted((a, b) for a, b in pairs if a < b and (b, a) in pairs)


def lines_per_folder(found: dict[str, Path]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for module, path in found.items():
        counts[folder(module)] += len(path.read_text(encoding="utf-8").splitlines())
    return dict(counts)


def main() -> int:
    found = modules()
    graph = edges(found)
    print(f"{len(found)} modules, {sum(map(len, graph.values()))} import edges")
    print(f"file cycles: {len(file_cycles(graph))}", *(f"  {' <-> '.join(c)}" for c in file_cycles(graph)), sep="\n")
    print(f"folder cycles: {len(folder_cycles(graph))}", *(f"  {a} <-> {b}" for a, b in folder_cycles(graph)), sep="\n")
    up = upward(graph)
    print(f"upward edges: {len(up)}", *(f"  {a} -> {b}" for a, b in up), sep="\n")
    print("lines per folder:", ", ".join(f"{k} {v}" for k, v in sorted(lines_per_folder(found).items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
