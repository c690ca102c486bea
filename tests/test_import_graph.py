"""The import graph (bench/import_graph.py): no module imports itself back through others, and no new import points
up the layers (tools, sandbox, agents, graphs, bottom up). The upward imports left are listed: the list may only
shrink (issue 40 removes them)."""

from __future__ import annotations

from bench.import_graph import edges, file_cycles, folder_cycles, modules, upward

# Records the harness still takes from the sandbox's protocol and evaluation's use of the sandbox: issue 40's next
# step (the records at the bottom, the evaluation above the sandbox).
KNOWN_UPWARD = {
    ("tools.correctness", "sandbox.protocol"),
    ("tools.evaluation", "sandbox.config"),
    ("tools.evaluation", "sandbox.devices"),
    ("tools.evaluation", "sandbox.protocol"),
    ("tools.roofline", "sandbox.protocol"),
    ("tools.runtime_checks", "sandbox.channel"),
    ("tools.runtime_checks", "sandbox.protocol"),
    ("tools.timing", "sandbox.protocol"),
}
GRAPH = edges(modules())


def test_no_file_cycle() -> None:
    assert file_cycles(GRAPH) == []


def test_no_new_import_points_up_the_layers() -> None:
    new = sorted(set(upward(GRAPH)) - KNOWN_UPWARD)
    assert not new, f"imports from a lower layer to a higher one: {new}"


def test_the_list_of_upward_imports_only_shrinks() -> None:
    gone = sorted(KNOWN_UPWARD - set(upward(GRAPH)))
    assert not gone, f"no longer imported, take them off KNOWN_UPWARD: {gone}"


def test_the_detector_finds_cycles_and_upward_edges() -> None:
    graph = {"tools.a": {"tools.b"}, "tools.b": {"tools.c"}, "tools.c": {"tools.a", "sandbox.d"}, "sandbox.d": set()}
    assert file_cycles(graph) == [["tools.a", "tools.b", "tools.c"]]
    assert upward(graph) == [("tools.c", "sandbox.d")] and folder_cycles(graph) == []
    assert folder_cycles({**graph, "sandbox.d": {"tools.a"}}) == [("sandbox", "tools")]
