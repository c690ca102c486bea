"""The import graph (bench/import_graph.py): no module imports itself back through others, no two folders import
each other, and no import points up the layers (tools, sandbox, agents, graphs, bottom up)."""

from __future__ import annotations

from bench.import_graph import edges, file_cycles, folder_cycles, modules, upward

GRAPH = edges(modules())


def test_no_file_cycle() -> None:
    assert file_cycles(GRAPH) == []


def test_no_folder_cycle_and_no_import_up_the_layers() -> None:
    assert folder_cycles(GRAPH) == []
    assert upward(GRAPH) == [], "imports from a lower layer to a higher one"


def test_the_detector_finds_cycles_and_upward_edges() -> None:
    graph = {"tools.a": {"tools.b"}, "tools.b": {"tools.c"}, "tools.c": {"tools.a", "sandbox.d"}, "sandbox.d": set()}
    assert file_cycles(graph) == [["tools.a", "tools.b", "tools.c"]]
    assert upward(graph) == [("tools.c", "sandbox.d")] and folder_cycles(graph) == []
    assert folder_cycles({**graph, "sandbox.d": {"tools.a"}}) == [("sandbox", "tools")]
