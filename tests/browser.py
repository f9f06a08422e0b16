"""Open a page in headless Chromium and report what a reader would see, with no extra deps.

Speaks the DevTools protocol over ``--remote-debugging-pipe`` (JSON messages ending in a NUL
byte; commands on fd 3, replies on fd 4), so no websocket client is needed. The browser
gets no network: a proxy that refuses every connection, so a page that fetched anything
(a CDN script) would fail to load it, and each request it tried is recorded.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome")
NO_NETWORK = "--proxy-server=127.0.0.1:9"  # the discard port: nothing listens there


def find_chromium() -> str | None:
    return next((path for name in NAMES if (path := shutil.which(name))), None)


@dataclass
class PageLoad:
    """What happened while a page loaded: console errors, uncaught exceptions, requests."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class Chromium:
    """One headless Chromium with one page, driven over the DevTools pipe."""

    def __init__(self, executable: str, profile: Path, width: int = 1400, height: int = 900):
        commands_r, self._commands = os.pipe()
        self._replies, replies_w = os.pipe()

        def as_fds_3_and_4() -> None:  # in the child: the pipe ends Chromium expects
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands_r, replies_w)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",  # as root in a container
                "--disable-gpu",
                "--disable-dev-shm-usage",  # containers have a small /dev/shm
                "--remote-debugging-pipe",
                NO_NETWORK,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=as_fds_3_and_4,
            pass_fds=(3, 4),
        )
        os.close(commands_r)
        os.close(replies_w)
        self._buffer, self._next_id, self.events = b"", 0, []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        attached = self.send("Target.attachToTarget", targetId=target, flatten=True)
        self.page_id = attached["sessionId"]  # the protocol's name for an attached page
        self.width = width

    def send(self, method: str, page_id: str | None = None, timeout: float = 60, **params):
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if page_id:  # a command to the page, not to the browser
            message["sessionId"] = page_id
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def page(self, method: str, **params) -> dict[str, Any]:
        return self.send(method, page_id=self.page_id, **params)

    def wait_for(self, event: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self.events):
            self.events.append(self._receive(deadline))

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def load(self, url: str, settle_s: float = 1.0) -> PageLoad:
        """Open ``url``, wait for its load event and ``settle_s`` more (Plotly draws some
        parts in animation frames); return the errors and the requests it made."""
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.page(f"{domain}.enable")
        self.events.clear()
        self.page("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.evaluate(f"new Promise((done) => setTimeout(done, {int(settle_s * 1000)}))")
        return _page_load(self.events)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.page(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page, not only the window's height."""
        height = self.evaluate("document.documentElement.scrollHeight")
        shot = self.page(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        # it may close the pipe before it answers
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close", timeout=10)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._replies)


def _page_load(events: list[dict[str, Any]]) -> PageLoad:
    load = PageLoad()
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            load.errors.append(details.get("exception", {}).get("description") or details["text"])
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            load.errors.append(" ".join(str(a.get("value", a)) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            load.errors.append(params["entry"]["text"])
        elif method == "Network.requestWillBeSent":
            load.requests.append(params["request"]["url"])
    return load
