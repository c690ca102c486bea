"""A headless Chromium driven over the Chrome DevTools Protocol, for the report's browser tests.

Just enough of CDP to load a page, run JavaScript, click at a point like a user, collect console
errors, exceptions and network requests, and take a screenshot; no Selenium or Playwright needed::

    with Browser(shutil.which("chromium"), tmp_path) as page:
        page.goto(report.as_uri())
        page.click("#tree-c1-0 > summary")
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


class CDPError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; ``events`` keeps every CDP event the page sent."""

    def __init__(self, exe: str, workdir: Path, width: int = 1280, height: int = 1800) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        # a fresh profile each time: a used one holds the last port's marker and, if that browser
        # still runs, its singleton lock, and Chromium refuses to start on it
        self.profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=workdir))
        self.args = [
            exe,
            "--headless=new",
            "--no-sandbox",  # the tests may run as root (CI containers), where the sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--remote-debugging-port=0",
            f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.ws: ClientConnection | None = None
        self.events: list[dict[str, Any]] = []
        self._next_id = 0

    def __enter__(self) -> Browser:
        with (self.profile / "chromium.log").open("wb") as log:
            # its own session, so that closing it stops the zygote, renderers and helpers too
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            port = self._devtools_port(timeout_s=60)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
                targets = json.load(resp)
            page = next(t for t in targets if t["type"] == "page")
            # entered by hand (close() leaves it): websockets 17 warns about a connection used outside `with`
            self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=20).__enter__()
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
            self.ws = None
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:  # it had already exited, and its group with it
            self.proc.wait()
        self.proc = None

    def _devtools_port(self, timeout_s: float) -> int:
        """Chromium writes the port it picked to DevToolsActivePort in its profile once it listens."""
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise CDPError(f"chromium exited with {self.proc.returncode}; see {self.profile}/chromium.log")
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().splitlines()[0])
            time.sleep(0.1)
        raise CDPError(f"chromium did not open its DevTools port within {timeout_s} s")

    # ------------------------------------------------------------------------------------ protocol

    def send(self, method: str, params: dict[str, Any] | None = None, timeout_s: float = 30) -> dict[str, Any]:
        assert self.ws is not None
        self._next_id += 1
        self.ws.send(json.dumps({"id": self._next_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout_s
        while True:
            msg = json.loads(self.ws.recv(timeout=max(deadline - time.monotonic(), 0.01)))
            if msg.get("id") == self._next_id:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, method: str, timeout_s: float = 30) -> dict[str, Any]:
        assert self.ws is not None
        seen = len(self.events)
        deadline = time.monotonic() + timeout_s
        while True:
            for e in self.events[seen:]:
                if e.get("method") == method:
                    return e
            seen = len(self.events)
            self.events.append(json.loads(self.ws.recv(timeout=max(deadline - time.monotonic(), 0.01))))

    def drain(self, quiet_s: float = 0.5) -> None:
        """Collect the events that are still on their way (late console messages)."""
        assert self.ws is not None
        while True:
            try:
                self.events.append(json.loads(self.ws.recv(timeout=quiet_s)))
            except TimeoutError:
                return

    # ----------------------------------------------------------------------------------- the page

    def goto(self, url: str) -> None:
        seen = len(self.events)
        self.send("Page.navigate", {"url": url})
        if not any(e.get("method") == "Page.loadEventFired" for e in self.events[seen:]):
            self.wait_event("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise CDPError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click at the element's centre, as a user's would land (not element.click())."""
        box = self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left + Math.min(r.width / 2, 40), r.top + r.height / 2, r.width, r.height]; })()"
        )
        if not box or box[2] == 0 or box[3] == 0:
            raise CDPError(f"{selector}: not on the page or not visible ({box})")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1}
            )

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params |= {"captureBeyondViewport": True, "clip": {**size, "x": 0, "y": 0, "scale": 1}}
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", params)["data"]))
        return path

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and error log entries, as text."""
        out = []
        for e in self.events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a)) for a in p.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails']}")
            elif method == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log.{p['entry']['level']}: {p['entry']['text']} ({p['entry'].get('url', '')})")
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]
