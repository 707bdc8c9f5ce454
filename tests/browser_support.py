"""Helpers for the real-browser smoke test: a Streamlit server in a subprocess, and waits that read Streamlit's DOM.

Why these waits: in Streamlit 1.67 the header's `stStatusWidget` (the "running man") is not rendered in every
layout (it never appeared in this app's headless runs), so the run state is read from the attribute the front end
keeps on its root element, `[data-testid='stApp'][data-test-script-state]` ('initial', 'running', 'notRunning',
'rerunRequested', ...), through a MutationObserver that records every transition. The status widget is still
accepted as a "running" signal where it does show up.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOST = "127.0.0.1"


def browser_missing() -> str:
    """Why no browser test can run here, or "" when Debian's chromium and the `playwright` package are both present."""
    if importlib.util.find_spec("playwright") is None:
        return "the `playwright` package is not importable; install requirements-dev.txt"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing; install Debian's `chromium` (see the README)"
    return ""


def keep_to_this_machine(context: object) -> None:
    """A browser context's pages reach this machine's server (and data: or blob: URLs) only: anything else is aborted,
    so no test page fetches past the machine (Streamlit's front end asks the internet for a metrics config)."""

    def only_local(route) -> None:  # noqa: ANN001 - playwright's Route
        local = urlsplit(route.request.url).hostname == HOST or route.request.url.startswith(("data:", "blob:"))
        route.continue_() if local else route.abort()

    context.route("**/*", only_local)  # type: ignore[attr-defined]


def skip_module_without_browser(what: str = "the app") -> None:
    """At a browser test module's top: skip it, loudly (a warning in the summary as well as the skip reason), where no
    browser can run; `what` names what was then NOT checked."""
    missing = browser_missing()
    if missing:
        reason = f"BROWSER TEST SKIPPED, {what} was NOT checked in a browser: {missing}"
        warnings.warn(reason, stacklevel=2)
        pytest.skip(reason, allow_module_level=True)


# Installs (once per document) a recorder of the script-run state, and marks where "now" is in its log. Every state
# the attribute held is kept, however briefly: a mutation's old value is the state it replaced, so a 'running' that
# lasted less than one observer callback is still seen (reading the attribute in the callback saw only the last state
# and lost it, and the wait for a start then sat out its whole timeout). The whole document is watched, so a re-mounted
# root element is watched too.
INSTALL_RECORDER_JS = """() => {
  const app = document.querySelector("[data-testid='stApp']");
  if (!app) return -1;
  if (!window.__stStates) {
    window.__stStates = [app.dataset.testScriptState];
    new MutationObserver(records => {
      for (const r of records) window.__stStates.push(r.oldValue);
      const now = document.querySelector("[data-testid='stApp']");
      if (now) window.__stStates.push(now.dataset.testScriptState);
    }).observe(document.body, {
      attributes: true, attributeOldValue: true, subtree: true, attributeFilter: ["data-test-script-state"]});
    new MutationObserver(() => {
      if (document.querySelector("[data-testid='stStatusWidget']")) window.__stStates.push("statusWidget");
    }).observe(document.body, {childList: true, subtree: true});
  }
  return window.__stStates.length;
}"""
STARTED_SINCE_JS = """(mark) => (window.__stStates || []).slice(mark)
  .some(s => s === "running" || s === "rerunRequested" || s === "statusWidget")"""
IDLE_JS = """() => {
  const app = document.querySelector("[data-testid='stApp']");
  return !!app && app.dataset.testScriptState === "notRunning"
    && !document.querySelector("[data-testid='stStatusWidget']")
    && !document.querySelector("[data-stale='true']")
    && !document.querySelector("[data-testid='stSpinner']");
}"""
# A chart counts as drawn when vega-embed has put a canvas or svg of non-zero size inside it. Charts the page does not
# show (an inactive tab, an expander collapsed in presenter mode) are left out: vega-embed never sizes them, so a wait
# for "every chart drawn" sat out its whole timeout on each such page (20 s a page in a walk).
CHARTS_JS = """() => Array.from(document.querySelectorAll("[data-testid='stVegaLiteChart']"))
  .filter(el => el.checkVisibility()).map(el => {
  const g = el.querySelector("canvas, svg.marks");
  const r = g ? g.getBoundingClientRect() : {width: 0, height: 0};
  return r.width > 0 && r.height > 0;
})"""
# Streamlit scrolls inside `stMain`, so a full-page screenshot needs a viewport as tall as the content.
CONTENT_HEIGHT_JS = """() => Math.max(...["stMain", "stSidebarContent"]
  .map(t => document.querySelector(`[data-testid='${t}']`)).filter(Boolean).map(e => e.scrollHeight),
  document.documentElement.scrollHeight)"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.read().decode().strip() == "ok"
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, then SIGKILL if it has not gone within 10 s."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def log_tail(log_path: Path, chars: int = 3000) -> str:
    try:
        return log_path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no server log)"


@dataclass(frozen=True)
class HostedApp:
    """The app as deployed (deploy/run.sh, hosted mode), started once per session (tests/conftest.py)."""

    url: str
    log: Path
    turn_log: Path  # one line per finished device turn (EXPLORER_TURN_LOG), every test's turns


RUN_SCRIPT = REPO_ROOT / "deploy" / "run.sh"  # the deployment recipe's entry command: what the tests start


def listens_on(proc: subprocess.Popen, port: int) -> bool:
    """Whether `proc` (or a process it started) is what listens on `port`. Another server can answer on the same
    port: another test run on this machine may bind it between free_port() and our server's own bind."""
    try:
        ours = {proc.pid, *(child.pid for child in psutil.Process(proc.pid).children(recursive=True))}
    except psutil.NoSuchProcess:
        return False
    listeners = psutil.net_connections(kind="tcp")
    return any(c.pid in ours for c in listeners if c.status == psutil.CONN_LISTEN and c.laddr.port == port)


def listening_pid(url: str) -> int | None:
    """The id of the process that listens on `url`'s port (the server, for its RSS), or None."""
    port = int(url.rsplit(":", 1)[1])
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid is not None:
            return c.pid
    return None


def _started(proc: subprocess.Popen, url: str, port: int, log_path: Path, timeout_s: float) -> bool:
    """Poll until our server answers on `port` (True), or until it has exited because another server holds the port
    (False); any other failure raises with the server's log."""
    deadline = time.monotonic() + timeout_s
    while not (_healthy(url) and listens_on(proc, port)):
        if proc.poll() is not None:
            if _healthy(url):
                return False
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log_tail(log_path)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"streamlit not healthy after {timeout_s:.0f} s:\n{log_tail(log_path)}")
        time.sleep(0.25)
    return True


@contextlib.contextmanager
def streamlit_server(
    log_path: Path, startup_timeout_s: float = 60.0, env: dict[str, str] | None = None, attempts: int = 3
) -> Iterator[str]:
    """The app as deployed (`deploy/run.sh`: hosted mode, headless) on a free local port; yields its URL; always
    stopped. `env` adds or overrides settings (e.g. `EXPLORER_HOSTED=0`, a cap, `EXPLORER_TURN_LOG`). A port that
    another process took first is given up for another one."""
    for _ in range(attempts):
        port = free_port()
        url = f"http://{HOST}:{port}"
        settings = {
            **os.environ,
            "EXPLORER_HOSTED": "1",  # as deployed, whatever the shell running the tests has set
            "EXPLORER_HOST": HOST,
            "EXPLORER_PORT": str(port),
            "EXPLORER_PYTHON": sys.executable,  # the interpreter running the tests, with its packages
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error",
            **(env or {}),
        }
        with open(log_path, "wb") as log:
            # Own process group, so that everything it starts can be stopped together.
            proc = subprocess.Popen(
                ["bash", str(RUN_SCRIPT)],
                cwd=REPO_ROOT,
                env=settings,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            if _started(proc, url, port, log_path, startup_timeout_s):
                yield url
                return
        finally:
            _stop(proc)
    raise RuntimeError(f"another server took the port each of {attempts} times:\n{log_tail(log_path)}")


def mark_run_state(page) -> int:
    """Start recording run-state transitions (if not already) and return a mark to wait from."""
    page.wait_for_selector("[data-testid='stApp']", state="attached")
    return page.evaluate(INSTALL_RECORDER_JS)


def wait_until_rerun_done(page, mark: int, timeout_s: float, start_timeout_s: float = 10.0) -> None:
    """Wait until a rerun has started after `mark` and the app is idle again (no stale elements, no spinner).

    A very short rerun may be batched away by React before 'running' is ever drawn: if no start is seen within
    `start_timeout_s`, being idle is enough.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(STARTED_SINCE_JS, arg=mark, timeout=start_timeout_s * 1000, polling=50)
    page.wait_for_function(IDLE_JS, timeout=timeout_s * 1000, polling=100)


def wait_for_charts(page, timeout_s: float, at_least: int = 0) -> tuple[int, int]:
    """(charts drawn, chart elements) once at least `at_least` chart elements are there and every one is drawn, or
    whatever is there at the timeout. Why `at_least`: Streamlit sends a page's elements one by one, so a page whose
    text is in may have its first chart and not yet the rest."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    ready_js = f"() => {{ const d = ({CHARTS_JS})(); return d.length >= {int(at_least)} && d.every(Boolean); }}"
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(ready_js, timeout=timeout_s * 1000, polling=200)
    drawn = page.evaluate(CHARTS_JS)
    return sum(drawn), len(drawn)


# Resolves after two animation frames: a layout change (a new viewport size) has been laid out and painted.
TWO_FRAMES_JS = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"


def settle(page, timeout_s: float = 5.0) -> None:
    """Wait, by polling rather than a fixed sleep, until a resized page has painted and every chart on it is drawn."""
    page.evaluate(TWO_FRAMES_JS)
    wait_for_charts(page, timeout_s)


def screenshot_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """Where a browser test keeps its screenshots and measurements: `$EXPLORER_SCREENSHOTS` if set (for a human to
    look at), else a fresh folder `name` in pytest's temporary folder."""
    wanted = os.environ.get("EXPLORER_SCREENSHOTS")
    if not wanted:
        return tmp_path_factory.mktemp(name)
    folder = Path(wanted).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def full_screenshot(page, path: Path, width: int, height: int, max_height: int = 12_000) -> None:
    """A screenshot of everything on the page where a human asked for screenshots (`$EXPLORER_SCREENSHOTS`): the
    viewport is stretched to the content, then restored. Otherwise the first screen only: stretching makes Streamlit
    lay out and redraw every chart twice, seconds a page in a walk, for pictures nobody opens."""
    if not os.environ.get("EXPLORER_SCREENSHOTS"):
        page.screenshot(path=str(path))
        return
    content = min(max_height, int(page.evaluate(CONTENT_HEIGHT_JS)) + 40)
    if content > height:
        page.set_viewport_size({"width": width, "height": content})
        settle(page)
    try:
        page.screenshot(path=str(path), full_page=True)
    finally:
        if content > height:
            page.set_viewport_size({"width": width, "height": height})
