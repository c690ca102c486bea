"""The console's share of the log (graphs.logs): short warnings, long waits at any level, every detail in the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from graphs.logs import CONSOLE_LINE, configure_logging


def test_a_long_warning_is_one_short_console_line_and_whole_in_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.jsonl"
    detail = "the machine had slow spells while it ran\n" * 12
    configure_logging(False, events)
    try:
        log = structlog.get_logger("test")
        log.warning("timing_noisy", candidate_id="c1-0", detail=detail)
        log.info("candidate_profiled", candidate_id="c1-0")  # below the console's level
        log.info("waiting for a turn on the CPU: 2 s so far", progress=True)  # a long wait: said at any level
    finally:
        configure_logging(False, None)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert "timing_noisy candidate_id=c1-0 detail=the machine had" in lines[0] and lines[0].endswith("…")
    assert len(lines[0]) < CONSOLE_LINE + 60  # the renderer's timestamp and level come before it
    assert "waiting for a turn on the CPU: 2 s so far" in lines[1] and "progress" not in lines[1]
    logged = [json.loads(line) for line in events.read_text().splitlines()]
    assert logged[0]["detail"] == detail and logged[1]["event"] == "candidate_profiled" and logged[2]["progress"]


def test_verbose_shows_every_event_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(True, None)
    try:
        structlog.get_logger("test").info("candidate_profiled", detail="x" * 400)
    finally:
        configure_logging(False, None)
    assert "x" * 400 in capsys.readouterr().err
