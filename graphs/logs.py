"""Logging, configured once by the CLI: JSON lines into a run's events.jsonl, a readable console.

Library code only asks ``structlog.get_logger(__name__)`` and binds run_id, role, candidate_id.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, TextIO

import structlog

from tools.keys import redact_data

_events: TextIO | None = None


def _redact_keys(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """Replace every held API key (``tools.keys``) before the event is written anywhere: an error text
    or a candidate's output may quote one."""
    return redact_data(event)


def _tee_to_events(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    if _events is not None:
        _events.write(json.dumps(event, default=str) + "\n")
        _events.flush()
    return event


CONSOLE_LINE = 160  # without --verbose, the most a console line of a log event takes; the whole event is in the file
_FRAME = ("event", "level", "timestamp")


def _console_filter(min_level: int, short: bool) -> Any:
    """The console's share of the events: those at ``min_level`` and up, and long waits at any level; ``short``: each
    as one line of at most ``CONSOLE_LINE`` characters (events.jsonl keeps the whole event), so that a long warning
    does not bury the progress lines around it."""

    def keep(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        wait = event.pop("progress", False)  # a long wait (sandbox.devices.WaitNotice) is said at any level
        if not wait and logging.getLevelNamesMapping().get(event.get("level", "info").upper(), 20) < min_level:
            raise structlog.DropEvent
        if not short:
            return event
        text = " ".join([str(event["event"]), *(f"{k}={v}" for k, v in event.items() if k not in _FRAME)])
        text = " ".join(text.split())  # one line: a field's newlines (a traceback, a log) would break it
        if len(text) > CONSOLE_LINE:
            text = text[: CONSOLE_LINE - 1] + "…"
        return {"event": text, **{k: event[k] for k in _FRAME[1:] if k in event}}

    return keep


def _stderr_logger(*args: Any) -> structlog.PrintLogger:
    """A console logger on the ``sys.stderr`` of the moment (loggers are not cached): one bound to the stream of
    configure time writes to a closed file once that stream has been replaced and closed (a test's captured
    stderr), and the event that failed to print is lost with the run's step it came from."""
    return structlog.PrintLogger(file=sys.stderr)


def configure_logging(verbose: bool = False, events_path: Path | None = None) -> None:
    """INFO and up go to events.jsonl; the console shows WARNING and up, one short line each (INFO, whole, with
    --verbose), and long waits for a device turn."""
    global _events
    if _events is not None:
        _events.close()
    _events = events_path.open("a") if events_path else None
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # A traceback as text, so that it is redacted too (and printed plain: no locals).
            structlog.processors.format_exc_info,
            _redact_keys,
            _tee_to_events,
            _console_filter(logging.INFO if verbose else logging.WARNING, short=not verbose),
            structlog.dev.ConsoleRenderer(
                colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
            ),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
