"""Open a local page in headless Chromium over the DevTools protocol, stdlib only.

Chromium is started with ``--remote-debugging-pipe``: it reads CDP commands from fd 3 and writes
replies and events to fd 4, as NUL-terminated JSON. No websocket, no browser download, no
Python dependency: any ``chromium`` (Debian's, installed by ``make setup``) will do.

:func:`inspect_page` loads a file, waits for its load event, and returns what the page did:
console errors, uncaught exceptions, log errors, every URL it requested (with the HTTP status and
the bytes of each response), the counts of elements a test names, how many images decoded, and a PNG
screenshot. For an app that keeps loading after its load event (rerun's WebAssembly viewer) it can
block URLs (outside hosts) and wait until a response from a given URL has brought data.
"""

from __future__ import annotations

import base64
import json
import os
import selectors
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The path of a Chromium on PATH ($AIRPLAY_CHROMIUM first), or None."""
    for name in (os.environ.get("AIRPLAY_CHROMIUM"), *CANDIDATES):
        if name and (path := shutil.which(name)):
            return path
    return None


@dataclass
class PageReport:
    console_errors: list[str] = field(default_factory=list)
    """console.error / console.assert calls, uncaught exceptions and the browser's error log entries."""
    requests: list[str] = field(default_factory=list)
    """Every URL the page requested (its first 200 characters: data: URIs are long)."""
    statuses: dict[str, int] = field(default_factory=dict)
    """URL -> HTTP status of its (last) response."""
    received: dict[str, int] = field(default_factory=dict)
    """URL -> bytes of response data received (summed over its requests; a streamed response as it comes)."""
    failed: dict[str, str] = field(default_factory=dict)
    """URL -> why loading it failed (net::ERR_BLOCKED_BY_CLIENT for a blocked URL, ...)."""
    counts: dict[str, int] = field(default_factory=dict)
    images: int = 0
    images_decoded: int = 0
    """Images with ``complete`` and ``naturalWidth > 0``."""
    title: str = ""
    screenshot_png: bytes = b""


class _Pipe:
    """CDP over Chromium's debugging pipe: commands on one fd, messages on the other."""

    def __init__(self, write_fd: int, read_fd: int, proc: subprocess.Popen) -> None:
        self.w, self.r, self.proc = write_fd, read_fd, proc
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []
        self.sel = selectors.DefaultSelector()
        self.sel.register(read_fd, selectors.EVENT_READ)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium: no reply in time")
            if not self.sel.select(left):
                continue
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed its debugging pipe (exit code {self.proc.poll()})")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout_s: float = 20.0) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"chromium: {method} failed: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_until(self, predicate, timeout_s: float) -> None:
        """Read messages (kept in ``events``) until ``predicate(events)`` is true; TimeoutError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self.events):
            self.events.append(self._read_message(deadline))

    def wait_event(self, method: str, timeout_s: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout_s
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        while True:
            e = self._read_message(deadline)
            if e.get("method") == method:
                return e
            self.events.append(e)


def inspect_page(path: str | Path, selectors_to_count: tuple[str, ...] = ("table", "img"),
                 viewport: tuple[int, int] = (1400, 1000), chromium: str | None = None,
                 timeout_s: float = 30.0, settle_s: float = 0.0, block_urls: tuple[str, ...] = (),
                 wait_for_data: str | None = None) -> PageReport:
    """Open ``path`` (a file, or an http(s) URL) in headless Chromium and report on it (see :class:`PageReport`).

    ``block_urls``: URL patterns (``*`` wildcards) the browser refuses to load (net::ERR_BLOCKED_BY_CLIENT).
    ``wait_for_data``: after the load event, wait (up to ``timeout_s``) until a response from a URL that
    starts with this has brought data (TimeoutError otherwise). ``settle_s``: seconds to wait then, before
    looking."""
    exe = chromium or find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH")
    url = str(path) if str(path).startswith(("http://", "https://")) else Path(path).resolve().as_uri()
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()
    profile = tempfile.mkdtemp(prefix="airplay-chromium-")

    def child_fds() -> None:  # fd 3: commands in, fd 4: messages out
        a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
        os.dup2(a, 3)
        os.dup2(b, 4)

    cmd = [exe, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--mute-audio", f"--user-data-dir={profile}",
           "about:blank"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            pass_fds=(3, 4), preexec_fn=child_fds, start_new_session=True)
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    report = PageReport()
    try:
        cdp = _Pipe(to_chrome_w, from_chrome_r, proc)
        target = cdp.call("Target.createTarget", {"url": "about:blank"}, timeout_s=timeout_s)["targetId"]
        session = cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.call(f"{domain}.enable", session=session)
        width, height = viewport
        cdp.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        if block_urls:
            cdp.call("Network.setBlockedURLs", {"urls": list(block_urls)}, session=session)
        cdp.call("Page.navigate", {"url": url}, session=session)
        cdp.wait_event("Page.loadEventFired", timeout_s=timeout_s)
        if wait_for_data is not None:
            def data_from(events) -> bool:
                ids = {e["params"]["requestId"] for e in events if e.get("method") == "Network.requestWillBeSent"
                       and e["params"].get("request", {}).get("url", "").startswith(wait_for_data)}
                return any(e.get("method") == "Network.dataReceived" and e["params"].get("requestId") in ids
                           and e["params"].get("dataLength", 0) > 0 for e in events)

            try:
                cdp.wait_until(data_from, timeout_s)
            except TimeoutError:
                raise TimeoutError(f"chromium: no data from {wait_for_data} within {timeout_s:.0f} s") from None
        if settle_s > 0:  # a page that keeps working after its load event (a WebAssembly app)
            time.sleep(settle_s)
        counts_js = "{" + ",".join(f"{json.dumps(s)}: document.querySelectorAll({json.dumps(s)}).length"
                                   for s in selectors_to_count) + "}"
        expression = (f"(async () => {{ const imgs = [...document.images];"
                      f" await Promise.all(imgs.map(i => i.decode().catch(() => null)));"
                      f" return JSON.stringify({{counts: {counts_js}, images: imgs.length,"
                      f" decoded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,"
                      f" title: document.title}}); }})()")
        result = cdp.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                               "returnByValue": True}, session=session, timeout_s=timeout_s)
        if "exceptionDetails" in result:
            raise RuntimeError(f"chromium: evaluating the page failed: {result['exceptionDetails']}")
        found = json.loads(result["result"]["value"])
        report.counts, report.images, report.images_decoded = found["counts"], found["images"], found["decoded"]
        report.title = found["title"]
        shot = cdp.call("Page.captureScreenshot", {"format": "png"}, session=session, timeout_s=timeout_s)
        report.screenshot_png = base64.b64decode(shot["data"])
        urls: dict[str, str] = {}  # requestId -> URL
        for e in cdp.events:
            method, params = e.get("method"), e.get("params", {})
            url_of = urls.get(params.get("requestId", ""), "")
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                report.console_errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                                      for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                report.console_errors.append(str(params.get("exceptionDetails", {}).get("text", params)))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                report.console_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
            elif method == "Network.requestWillBeSent":
                urls[params["requestId"]] = params.get("request", {}).get("url", "")[:200]
                report.requests.append(urls[params["requestId"]])
            elif method == "Network.responseReceived":
                report.statuses[url_of or params["response"]["url"][:200]] = int(params["response"]["status"])
            elif method == "Network.dataReceived" and url_of:
                report.received[url_of] = report.received.get(url_of, 0) + int(params.get("dataLength", 0))
            elif method == "Network.loadingFailed" and url_of:
                report.failed[url_of] = str(params.get("blockedReason") or params.get("errorText", ""))
        try:
            cdp.call("Browser.close", timeout_s=5)
        except (RuntimeError, TimeoutError):
            pass
    finally:
        os.close(to_chrome_w)
        os.close(from_chrome_r)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    return report
