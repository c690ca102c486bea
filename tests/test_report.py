"""``kforge report`` and ``kforge trace`` on real CPU runs, and the report opened in headless Chromium.

Two runs are made once for the test session (the xdist workers share them; each gets a copy): the builtin
team on the CPU softmax (real compile, checks and timing), and an LLM team served by a local fake OpenAI
server whose scripted answers include a compile error, a wrong kernel and an idea carrying a ``<script>``
tag. The browser tests skip without Chromium unless KFORGE_REQUIRE_CHROMIUM=1; their screenshots go to
tests/artifacts/ (or $KFORGE_TEST_ARTIFACTS).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from html import escape as html_escape
from pathlib import Path

import pytest
import torch

from graphs.plot import Point, speedup_svg, y_axis
from graphs.rundata import RoundSummary, load_run, role_wall_seconds
from tests.cdp import Browser, find_chromium
from tests.conftest import FIXTURES, ROOT
from tests.fake_openai_server import FakeOpenAIServer
from tools.paths import flocked

ARTIFACTS = Path(os.environ.get("KFORGE_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts")
SCRIPTED_IDEA = "one C loop per row, online max and sum <script>window.__pwned = 1</script>"
IDEA = "```json\n" + json.dumps([{"text": SCRIPTED_IDEA, "expected_gain": "2x", "parent_id": None}]) + "\n```"
REVIEW = '```json\n{"feedback": "keep going", "stop": false, "reasons": {}}\n```'


def kforge(*args: str, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphs.cli", *args],
        cwd=ROOT,
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def code(path: Path) -> str:
    return f"Here it is.\n\n```python\n{path.read_text()}```\n"


def run_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The run folder that ``make(runs_dir)`` writes, made once per test session and copied for the caller.

    Under pytest-xdist a module fixture is set up once per worker that runs the module's tests, and these runs
    take about a minute each; the workers share the session's base folder, so the first one makes the run (the
    others wait on a lock) and each test module gets a copy of its own to write reports into.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    runs = shared / f"shared-{name}"
    with flocked(shared / f"shared-{name}.lock"):
        if not (shared / f"shared-{name}.done").exists():
            shutil.rmtree(runs, ignore_errors=True)
            runs.mkdir()
            make(runs)
            (shared / f"shared-{name}.done").touch()
    (made,) = list(runs.iterdir())
    copy = tmp_path_factory.mktemp(name) / made.name
    shutil.copytree(made, copy)
    return copy


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The builtin team, two rounds of two ideas on the CPU softmax: a real run, end to end."""

    def make(root: Path) -> None:
        args = ("run", "softmax_small", "--device", "cpu", "--rounds", "2", "--ideas", "2", "--runs-dir", str(root))
        out = kforge(*args)
        assert out.returncode == 0, out.stdout + out.stderr

    return run_once(tmp_path_factory, "cpu-run", make)


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An LLM team: round 1 repairs a compile error with a kernel that computes in bfloat16 (the relaxed policy
    lets it through), round 2's kernel stays wrong and is rejected."""
    return run_once(tmp_path_factory, "llm-run", _llm_run)


def _llm_run(root: Path) -> None:
    wrong = code(FIXTURES / "candidates" / "wrong_softmax_cpu.py")
    bf16 = code(FIXTURES / "cheats" / "precision_downgrade_bf16.py")
    answers = [IDEA, code(FIXTURES / "candidates" / "syntax_error_cpu.py"), bf16, REVIEW]
    answers += [IDEA, wrong, wrong, REVIEW]
    with FakeOpenAIServer(models=("test-model",)) as server:
        for text in answers:
            server.reply(text, prompt_tokens=1200, completion_tokens=300)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        out = kforge(
            *("run", "softmax_small", "--device", "cpu", "--rounds", "2", "--ideas", "1", "--repairs", "1"),
            *("--no-compile", "--no-seed-builtin", "--model", "openai:test-model", "--base-url", server.url),
            *("--runs-dir", str(root)),
            env=env,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert server.pending == 0


def chromium() -> str:
    exe = find_chromium()
    if exe:
        return exe
    if os.environ.get("KFORGE_REQUIRE_CHROMIUM") == "1":
        pytest.fail("KFORGE_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install -y chromium)")
    pytest.skip("chromium is not installed (apt-get install -y chromium; KFORGE_REQUIRE_CHROMIUM=1 makes this fail)")


def tree_summary(html: str, cid: str) -> str:
    match = re.search(rf'<details id="tree-{re.escape(cid)}"[^>]*><summary>(.*?)</summary>', html)
    assert match, f"no tree node for {cid}"
    return match.group(1)


# ------------------------------------------------------------------------------------- the files


def test_report_command_writes_one_self_contained_file(cpu_run: Path) -> None:
    (cpu_run / "report.html").unlink()  # `kforge run` wrote one; the command must write it again
    out = kforge("report", cpu_run.name, "--runs-dir", str(cpu_run.parent))
    assert out.returncode == 0, out.stderr
    report = cpu_run / "report.html"
    assert out.stdout.strip() == f"wrote {report.resolve()}"
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    # nothing to fetch: no external script, style, image or font, and every link stays in the page
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b[^>]*\b(src|href)\s*=", html, re.I)
    assert "@import" not in html and "url(" not in html
    assert all(h.startswith("#") for h in re.findall(r'\bhref="([^"]*)"', html))
    run = load_run(cpu_run.name, cpu_run.parent)
    assert len(run.candidates) == 4
    for c in run.candidates:
        assert f'id="tree-{c.id}"' in html and f'id="cand-{c.id}"' in html and f'data-cid="{c.id}"' in html


def test_report_sections_hold_the_runs_numbers(cpu_run: Path) -> None:
    run = load_run(cpu_run.name, cpu_run.parent)
    html = (cpu_run / "report.html").read_text()
    ref = run.reference
    assert ref is not None and ref.compile_ms is not None
    if run.best is not None:
        best = run.best
        headline = [f"best: {best.id} at {best.speedup_vs_best:.3f}×", f"{best.speedup_vs_compile:.3f}×"]
    else:  # a loaded CPU can leave every candidate behind eager: the reference stands, the tree is still there
        best = max((c for c in run.candidates if c.speedup_vs_best), key=lambda c: c.speedup_vs_best)
        headline = ["no verified candidate beat the reference: the result is the reference (speedup 1.0×)"]
    for text in (
        f"{ref.eager_ms:.4f}",
        f"{ref.compile_ms:.4f}",
        f"{ref.floor_ms:.4f}",
        *headline,
        f"{best.pct_roofline:.1f}%",
        "relaxed: atol=0.01 rtol=0.01",
        html_escape("the problem's own (no reduced-precision finding)"),
        f"{best.worst('max_abs_error'):.3g}",
        "speedup vs faster reference",  # the plot's axis labels
        ">round</text>",
        "--- reference (softmax_small)",  # a root candidate's diff against the problem file
        f"+++ {best.id}",
        "Spend per role",
        run.meta["commit"],
        run.reference.environment["torch"],
    ):
        assert text in html, text
    child = next(c for c in run.candidates if c.parent_id is not None)  # round 2 branches from round 1's fastest
    assert f"--- {child.parent_id}\n+++ {child.id}" in re.sub(r"</?span[^>]*>", "", html)
    # each role's wall time comes from its node_start/node_end events, coders paired per idea
    wall = role_wall_seconds(run.events)
    assert wall["baseline"] > 0 and wall["coder"] > 0 and wall["profiler"] > 0


def test_trace_and_report_never_disagree(cpu_run: Path) -> None:
    trace = kforge("trace", cpu_run.name, "--runs-dir", str(cpu_run.parent))
    assert trace.returncode == 0, trace.stderr
    html = (cpu_run / "report.html").read_text()
    rows = re.findall(r"└─ (c\d+-\d+)(?: ★)?  \[(\w+)/(\w+)\]  (.+?) vs best ref · (\S+) roofline", trace.stdout)
    assert len(rows) == 4, trace.stdout
    for cid, status, verdict, speedup, roofline in rows:
        summary = tree_summary(html, cid)
        assert f"{status}/{verdict}" in summary and html_escape(speedup) in summary, (cid, speedup, summary)
        assert f"{roofline} roofline" in summary, cid
    # A timed candidate's speedup comes with its interval and what that allows saying
    assert any("95%: " in speedup for *_, speedup, _ in rows), trace.stdout
    eager = re.search(r"reference  eager (\S+) ms", trace.stdout)
    assert eager and f"eager {eager.group(1)} ms" in html


def test_llm_run_report_shows_prompts_tokens_rejections_and_escapes_text(llm_run: Path) -> None:
    run = load_run(llm_run.name, llm_run.parent)
    html = (llm_run / "report.html").read_text()
    assert [c.verdict for c in run.candidates] == ["accepted", "rejected"]
    assert "incorrect/rejected" in tree_summary(html, "c2-0")
    # c1-0 computes in bfloat16: the report, the trace and the critic all say so.
    bf16 = run.candidate("c1-0")
    assert bf16 is not None and bf16.precision.startswith("reduced, which the relaxed policy allows")
    assert "precision_downgrade at line 9: uses torch.bfloat16" in bf16.precision
    assert f"precision {html_escape(bf16.precision)}</p>" in html
    assert bf16.critic_reason and bf16.critic_reason.endswith(
        "; computes in reduced precision, as the relaxed policy allows"
    )
    trace = kforge("trace", llm_run.name, "--runs-dir", str(llm_run.parent))
    assert re.search(r"└─ c1-0(?: ★)?  \[ok/accepted\]  .* roofline · reduced precision · ", trace.stdout), trace.stdout
    assert "reduced precision" in tree_summary(html, "c1-0") and "reduced precision" not in tree_summary(html, "c2-0")
    (c2,) = [line for line in trace.stdout.splitlines() if line.lstrip().startswith("└─ c2-0")]
    assert "reduced precision" not in c2
    planner = next(u for u in run.usage if u.role == "planner")
    assert (planner.llm_calls, planner.input_tokens, planner.output_tokens) == (2, 2400, 600)
    assert re.search(r"<td>planner</td><td>[\d.]+</td><td>2</td><td>2400</td><td>600</td>", html)
    assert 'coder <span class="kind">prompt</span>' in html and "row_max" in html  # the repair saw the log
    assert "<script>window.__pwned" not in html
    assert html.count("&lt;script&gt;window.__pwned = 1&lt;/script&gt;") >= 4


def test_unknown_run_is_a_one_line_error(tmp_path: Path) -> None:
    for command in ("report", "trace"):
        out = kforge(command, "no-such-run", "--runs-dir", str(tmp_path))
        assert out.returncode == 2
        assert out.stderr.strip() == f"kforge: error: no-such-run: no such run (looked in {tmp_path})"


def test_unknown_candidate_is_a_one_line_error(cpu_run: Path) -> None:
    out = kforge("trace", cpu_run.name, "--candidate", "c9-9", "--runs-dir", str(cpu_run.parent))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no such candidate" in out.stderr and "c1-0" in out.stderr


def test_a_saved_ncu_profile_shows_in_trace_and_report(cpu_run: Path, tmp_path: Path) -> None:
    from tests.test_ncu import TWO_KERNELS
    from tools import ncu

    shutil.copytree(cpu_run, tmp_path / cpu_run.name)
    run = load_run(cpu_run.name, tmp_path)
    cid = run.best_id or run.candidates[0].id
    kernels = ncu.parse_csv(TWO_KERNELS)
    contenders = {"candidate": ncu.ContenderProfile(contender="candidate", kernels=kernels)}
    saved = ncu.ProfileReport(ncu="Version 2025.3.1.0", metrics=list(ncu.METRICS.values()), contenders=contenders)
    (tmp_path / cpu_run.name / "candidates" / cid / "profile.json").write_text(saved.model_dump_json())
    out = kforge("trace", cpu_run.name, "--candidate", cid, "--runs-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "ncu profile:" in out.stdout and "softmax_rows(float const*, float*, int)" in out.stdout
    out = kforge("report", cpu_run.name, "--runs-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    html = (tmp_path / cpu_run.name / "report.html").read_text()
    assert "Nsight Compute (Version 2025.3.1.0), one call" in html
    assert html_escape("softmax_rows(float const*, float*, int)") in html and "65536 × 128" in html


def test_profiling_a_runs_candidate_names_what_is_wrong_in_one_line(cpu_run: Path) -> None:
    runs = str(cpu_run.parent)
    out = kforge("profile", "--run", cpu_run.name, "--candidate", "c9-9", "--runs-dir", runs)
    assert out.returncode == 2 and "no such candidate" in out.stderr and "c1-0" in out.stderr
    out = kforge("profile", "softmax_small", "--run", cpu_run.name, "--runs-dir", runs)
    assert (out.returncode, out.stderr) == (
        2,
        "kforge: error: give a problem and candidate files, or --run RUN, not both\n",
    )
    if not torch.cuda.is_available():
        # A candidate named: on a busy machine the CPU run's reference may stand, and then no candidate is the best.
        out = kforge("profile", "--run", cpu_run.name, "--candidate", "c1-0", "--runs-dir", runs)
        assert (out.returncode, out.stderr) == (
            3,
            "kforge: error: profiling needs a CUDA GPU, and none is visible here\n",
        )


# -------------------------------------------------------------------------------------- the plot


def test_y_axis_turns_logarithmic_when_ratios_span_a_decade() -> None:
    assert not y_axis([0.9, 1.3, 2.5]).log
    wide = y_axis([0.05, 1.5, 12.0])
    assert wide.log and wide.lo < 0.05 and wide.hi > 12.0
    assert [t for t in wide.ticks() if t in (1.0, 10.0)] == [1.0, 10.0]
    assert y_axis([]).lo <= 1.0 <= y_axis([]).hi  # nothing timed: the reference still has a place


def test_plot_marks_untimed_candidates_and_labels_its_scale() -> None:
    points = [
        Point("c1-0", 1, 0.05, "accepted", "ok", False),
        Point("c1-1", 1, None, "rejected", "compile_error", False),
        Point("c2-0", 2, 12.0, "accepted", "ok", True),
    ]
    rounds = [RoundSummary(1, "c1-0", 0.05, 1.0), RoundSummary(2, "c2-0", 12.0, 12.0)]
    svg = speedup_svg(points, rounds)
    assert svg.count('class="pt"') == 2 and svg.count('class="pt failed"') == 1
    assert "y: log scale" in svg and "c1-1: compile_error, not timed (rejected)" in svg
    assert "c2-0: 12.000× (ok/accepted) — best" in svg
    cy = {m[0]: float(m[1]) for m in re.findall(r'data-cid="([^"]+)" cx="[\d.]+" cy="([\d.]+)"', svg)}
    assert cy["c2-0"] < cy["c1-0"]  # faster is higher


# ------------------------------------------------------------------------------------ the browser


def test_report_in_headless_chromium(cpu_run: Path, tmp_path: Path) -> None:
    exe = chromium()
    run = load_run(cpu_run.name, cpu_run.parent)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with Browser(exe, tmp_path) as page:
        page.goto((cpu_run / "report.html").as_uri())
        page.drain()
        # every candidate is on the page: tree node, detail card and plot point
        for c in run.candidates:
            found = page.js(
                f"['tree-{c.id}', 'cand-{c.id}'].every(id => document.getElementById(id))"
                f" && !!document.querySelector('#speedup-plot [data-cid=\"{c.id}\"]')"
            )
            assert found, c.id
        # the plot rendered: a drawn point per timed candidate, inside the plot's box, and its labels
        boxes = page.js(
            "[...document.querySelectorAll('#speedup-plot circle.pt')].map(p => p.getBoundingClientRect())"
            ".map(r => [r.width, r.height])"
        )
        assert len(boxes) == 4 and all(w > 4 and h > 4 for w, h in boxes)
        labels = page.js("[...document.querySelectorAll('#speedup-plot text')].map(t => t.textContent)")
        assert "round" in labels and "speedup vs faster reference" in labels and "1×" in labels
        assert page.screenshot(ARTIFACTS / "report-top.png").stat().st_size > 10_000

        # the tree folds and unfolds on a real click
        child = next(c for c in run.candidates if c.parent_id is not None)
        # checkVisibility(): a closed <details> hides its content with content-visibility, which keeps boxes
        visible = f"document.getElementById('tree-{child.id}').checkVisibility()"
        page.click("#collapse-all")
        assert page.js(f"!document.getElementById('tree-{child.parent_id}').open") and not page.js(visible)
        page.click(f"#tree-{child.parent_id} > summary")
        assert page.js(f"document.getElementById('tree-{child.parent_id}').open") and page.js(visible)
        page.js("document.getElementById('tree').scrollIntoView()")
        page.screenshot(ARTIFACTS / "report-tree.png")

        # a plot point opens that candidate's card
        assert not page.js(f"document.getElementById('cand-{child.id}').open")
        page.click(f"#speedup-plot circle[data-cid='{child.id}']")
        assert page.js(f"document.getElementById('cand-{child.id}').open")
        page.screenshot(ARTIFACTS / "report-candidate.png")
        page.drain()
        assert page.problems() == []
        assert page.requests() == [(cpu_run / "report.html").as_uri()]  # nothing fetched from anywhere
    print(f"\nscreenshots: {ARTIFACTS}/report-top.png, report-tree.png, report-candidate.png")  # noqa: T201


def test_llm_report_in_headless_chromium(llm_run: Path, tmp_path: Path) -> None:
    exe = chromium()
    with Browser(exe, tmp_path) as page:
        page.goto((llm_run / "report.html").as_uri())
        assert page.js("window.__pwned === undefined")  # the idea's <script> stayed text
        assert page.js("document.querySelectorAll('#speedup-plot .pt.failed').length") == 1
        assert not page.js("document.querySelector('#role-coder .msg').checkVisibility()")
        page.click("#role-coder > summary")
        assert page.js("document.querySelector('#role-coder .msg').checkVisibility()")
        shown = page.js("[...document.querySelectorAll('#role-coder .msg-head')].map(m => m.textContent)")
        assert any("prompt" in s for s in shown) and any("answer" in s for s in shown)
        page.drain()
        assert page.problems() == []
