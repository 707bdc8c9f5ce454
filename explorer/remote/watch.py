"""Reading a serving engine's /metrics over HTTP: one reading, and a watch that reads before and after each batch of
requests (polling the gauges while it runs) and hands back the server's delta over it (`explorer.remote.metrics`)."""

from __future__ import annotations

import threading
import time

import httpx

from explorer.core.errors import one_line
from explorer.remote.endpoint import parse_base_url
from explorer.remote.metrics import MetricsSnapshot, MetricsUnavailable, Peaks, ServerDelta, parse_metrics

FETCH_TIMEOUT_S = 3.0  # a /metrics page is a few hundred lines: seconds mean the server is not answering it
MAX_METRICS_BYTES = 8 << 20  # vLLM's page is ~60 kB; a multi-engine server's is a few hundred kB
POLL_INTERVAL_S = 0.5  # how often the gauges (KV usage, requests running) are sampled during a batch
# vLLM updates its histograms after it hands a request's last output to the HTTP side: a reading taken the moment the
# client has its last chunk can miss that request. The reading after a batch is retried until the server has counted
# the requests the client saw finish, for at most this long.
SETTLE_S = 2.0
SETTLE_STEP_S = 0.05


# --- reading a server ------------------------------------------------------------------------------------------------
def metrics_url(base_url: str) -> str:
    """The engines serve /metrics at their root, beside /v1 (vLLM, SGLang)."""
    url = parse_base_url(base_url)
    return url.normalized[: len(url.normalized) - len(url.path)] + "/metrics"


def read_metrics(base_url: str, client: httpx.Client | None = None, api_key: str | None = None) -> MetricsSnapshot:
    """One reading of the server's /metrics; MetricsUnavailable (one line, what the server did) otherwise."""
    url = metrics_url(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    own = client is None
    client = client or httpx.Client(timeout=FETCH_TIMEOUT_S, trust_env=False, follow_redirects=False)
    try:
        with client.stream("GET", url, headers=headers, timeout=FETCH_TIMEOUT_S) as response:
            if response.status_code != 200:
                raise MetricsUnavailable(f"{url} answered HTTP {response.status_code}")
            body = bytearray()
            for piece in response.iter_bytes():
                body += piece
                if len(body) > MAX_METRICS_BYTES:
                    raise MetricsUnavailable(f"{url} is over {MAX_METRICS_BYTES >> 20} MiB: not an engine's metrics")
    except httpx.HTTPError as exc:
        raise MetricsUnavailable(f"{url} could not be read ({one_line(exc)})") from None
    finally:
        if own:
            client.close()
    return parse_metrics(body.decode("utf-8", "replace"))


# --- a watch over a batch --------------------------------------------------------------------------------------------
class Watch:
    """Reads a server's /metrics around each batch and polls its gauges while the batch runs. The first failed
    reading says why (`unavailable`) and every later batch gets None: the requests are measured as before."""

    def __init__(self, base_url: str, api_key: str | None = None, poll_interval_s: float = POLL_INTERVAL_S) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.poll_interval_s = poll_interval_s
        self.unavailable = ""  # one line once a reading failed
        self.first: MetricsSnapshot | None = None  # the first reading: the whole run's delta starts here
        self.last: MetricsSnapshot | None = None

    def read(self) -> MetricsSnapshot | None:
        if self.unavailable:
            return None
        try:
            snapshot = read_metrics(self.base_url, api_key=self.api_key)
        except MetricsUnavailable as exc:
            self.unavailable = str(exc)
            return None
        self.first = self.first or snapshot
        self.last = snapshot
        return snapshot

    def settled(self, since: MetricsSnapshot | None, finished: int) -> MetricsSnapshot | None:
        """A reading once the server has counted `finished` more requests than at `since` (or after SETTLE_S)."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            after = self.read()
            if after is None or since is None:
                return after
            now, then = _finished(after), _finished(since)
            if now is None or then is None or now - then >= finished or time.monotonic() > deadline:
                return after
            time.sleep(SETTLE_STEP_S)

    def around(self) -> Batch:
        """`with watch.around() as batch: ...send...`; then `batch.delta` (None without metrics)."""
        return Batch(self)

    @property
    def whole(self) -> ServerDelta | None:
        """From the first reading to the last: everything the watch saw, warm-up included."""
        if self.first is None or self.last is None or self.unavailable:
            return None
        try:
            return ServerDelta.between(self.first, self.last)
        except MetricsUnavailable as exc:
            self.unavailable = str(exc)
            return None


class Batch:
    """One batch under a watch: a reading before, gauges polled in a thread during, a reading after."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.delta: ServerDelta | None = None
        self._stop = threading.Event()
        self._peaks: dict[str, float] = {}
        self._samples = 0
        self._before: MetricsSnapshot | None = None
        self._thread: threading.Thread | None = None
        self._expected = 0

    def expect(self, finished: int) -> None:
        """The requests the client saw finish in this batch: the reading after waits until the server counted them."""
        self._expected = finished

    def __enter__(self) -> Batch:
        self._before = self.watch.read()
        if self._before is not None and self.watch.poll_interval_s > 0:
            self._thread = threading.Thread(target=self._poll, name="metrics-poll", daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(self.watch.poll_interval_s):
            try:
                gauges = read_metrics(self.watch.base_url, api_key=self.watch.api_key).gauges
            except MetricsUnavailable:
                continue  # one missed sample: the readings around the batch decide whether there are metrics
            self._samples += 1
            for name in ("kv_usage", "running", "waiting"):
                if name in gauges:
                    self._peaks[name] = max(self._peaks.get(name, 0.0), gauges[name])

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=FETCH_TIMEOUT_S + 1)
        if self._before is None or exc[0] is not None:
            return
        after = self.watch.settled(self._before, self._expected)
        if after is None:
            return
        peak = self._peaks.get
        peaks = Peaks(peak("kv_usage"), peak("running"), peak("waiting"), self._samples)
        try:
            self.delta = ServerDelta.between(self._before, after, peaks)
        except MetricsUnavailable as exc_:
            self.watch.unavailable = str(exc_)


def _finished(snapshot: MetricsSnapshot) -> float | None:
    """Requests the server has finished, by its end-to-end histogram (or TTFT's where it has none)."""
    histogram = snapshot.histograms.get("e2e") or snapshot.histograms.get("ttft")
    return None if histogram is None else histogram.count
