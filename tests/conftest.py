"""Shared fixtures: tiny random models for the many fast invariants, the real embedded model loaded once, the device
figures measured once, one app server for the browser and load tests, one Chromium for every browser test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# No model hub at test time: every load must come from the embedded wheel or a local folder.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# No warm-up at server start (explorer/ui/warm_start.py) in AppTests or the shared test server: it would load the real
# model in the background of tests that patch loading to fail. tests/test_warm.py and test_browser_warm.py switch it on.
os.environ["EXPLORER_WARM"] = "0"
# No local vLLM found by default (explorer/remote/engine.py): the Endpoint and Room pages and `remote` draw the same
# whether or not `./run vllm` is running; tests/vllm_support.py points at the real one's state file itself.
os.environ["EXPLORER_VLLM_STATE"] = os.devnull

from explorer.core import device as device_module  # noqa: E402
from explorer.core.device import FiguresStore, device_profile  # noqa: E402
from explorer.core.device_profile import FIGURES_FILE_ENV  # noqa: E402
from explorer.core.lab_progress import Report, silent  # noqa: E402
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile  # noqa: E402
from explorer.hosting.client import DeviceLink  # noqa: E402
from explorer.models.loading import load_model  # noqa: E402
from explorer.ui.device_link import device_link  # noqa: E402
from explorer.ui.shared import read_once  # noqa: E402
from tests.browser_support import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    HostedApp,
    browser_missing,
    streamlit_server,
)
from tests.owner_support import LazyOwners, OwnersOfATest  # noqa: E402
from tests.tiny import save_tiny_gpt2, save_tiny_llama  # noqa: E402

# No figures file from the shell (explorer.core.device_profile): a test's stores measure, or are seeded below.
os.environ.pop(FIGURES_FILE_ENV, None)
MEASURE_CPU: Callable[..., DeviceProfile] = device_module.cpu_profile  # the real microbenchmarks


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`-n 2 -m "not browser and not server"`), the workers share the cores: two workers with two
    torch threads each on a 2-core machine made real-model passes several times slower (threads waiting on each
    other), one thread each did not. Every process a test starts gets the same share through OMP_NUM_THREADS:
    transformers serve, vLLM, the CLI, and the device owner of each app a browser test starts (it keeps torch's own
    count, at most one per core it runs on, so one thread here either way). The browser and server tests on two
    workers took 249 s with it, 287 s without (2026-11-29, `-m "(browser or server) and not alone"`, 2 cores)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def tiny_lm(tiny_llama_dir: Path) -> LoadedModel:
    return load_model(str(tiny_llama_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_gpt2_dir: Path) -> LoadedModel:
    return load_model(str(tiny_gpt2_dir), device="cpu", dtype="float32")


# --- device figures --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session", autouse=True)
def cpu_measured_once_per_session() -> Iterator[None]:
    """The CPU microbenchmarks (best of 5 matmuls of 2048^2 and 5 copies of 512 MB, ~3 s on 2 cores) run once per
    dtype per session: every later measurement, a "fresh" one included, returns those figures. A run, a re-measure
    button or a busy run's re-measurement behaves as in the app; only the seconds of benchmarking are gone. Tests
    about the measurement itself are marked `device_figures` and measure for real."""
    measured: dict[str, DeviceProfile] = {}

    def measured_once(dtype: str, progress: Report = silent) -> DeviceProfile:
        if dtype not in measured:
            # One set, never judged or retaken: what the other tests print must not depend on how busy the machine is.
            measured[dtype] = device_module.take_cpu_figures(dtype, progress)
        return measured[dtype]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(device_module, "cpu_profile", measured_once)
        yield


@pytest.fixture(autouse=True)
def device_figures_per_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `device_figures` test gets the real microbenchmarks; every other test's stores (each `FiguresStore` starts
    empty) are seeded from the session's figures when they first ask."""
    if request.node.get_closest_marker("device_figures"):
        monkeypatch.setattr(device_module, "cpu_profile", MEASURE_CPU)


@pytest.fixture
def figures() -> FiguresStore:
    """A fresh store of device figures, as one CLI command or one app server has."""
    return FiguresStore()


@pytest.fixture(scope="session", autouse=True)
def device_owners_in_threads() -> Iterator[LazyOwners]:
    """Every device link the app makes in this process reaches an owner in a thread of its own (tests/owner_support.py),
    not a child process: the same protocol, the test's patches in force, nothing left running after the session."""
    owners = LazyOwners()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("EXPLORER_DEVICE_URL", raising=False)
        patch.setattr(DeviceLink, "from_env", owners.link)
        yield owners
    owners.stop()


@pytest.fixture(autouse=True)
def fresh_device_owner(device_owners_in_threads: LazyOwners) -> Iterator[OwnersOfATest]:
    """Every test that sends a job to the device gets a device owner of its own, started on its first job: no model,
    turn or stepped request another test left behind (a module fixture's owner is not the test's)."""
    mine = OwnersOfATest(device_owners_in_threads)
    device_link.clear()
    read_once.clear()
    yield mine
    device_link.clear()
    read_once.clear()
    mine.stop()


@pytest.fixture(scope="session")
def cpu_figures() -> DeviceProfile:
    """The CPU's device figures, measured once for the session (the engine takes them as an argument)."""
    return device_profile("cpu", "float32")


@pytest.fixture(scope="session")
def real_lm() -> LoadedModel:
    """SmolLM2-135M-Instruct from the embedded GGUF (converted once into the user cache, then reloaded)."""
    return load_model("embedded", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def shape_lm() -> LoadedModel:
    """SmolLM2-135M's shape (`shape:smollm2-135m`): random weights, float32 on the CPU, built once (seconds)."""
    return load_model("shape:smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture(autouse=True)
def fresh_room_store() -> Iterator[None]:
    """Every test starts with no rooms: the Room's store is the web process's own (`room_view.room_store`), shared by
    its sessions, so one test's rooms, members and results must not reach the next."""
    from explorer.ui.room_view import room_store

    room_store.clear()
    yield
    room_store.clear()


# --- one app server and one browser for every browser test -----------------------------------------------------------
@pytest.fixture(scope="session")
def server_figures_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One figures file (`$EXPLORER_FIGURES_FILE`) for the app servers the tests share: the first to measure keeps its
    figures there and later ones read them, instead of 8-18 s of microbenchmarks each. A server that stands for a new
    machine's start (the warm-up tests) measures its own."""
    return tmp_path_factory.mktemp("server-figures") / "device-figures.json"


@pytest.fixture(scope="session")
def hosted_app(tmp_path_factory: pytest.TempPathFactory, server_figures_file: Path) -> Iterator[HostedApp]:
    """One server for the browser smoke tests and the load test: each opens its own browser sessions, so their state
    is their own, and the model loads (and the device is measured) in it once, not once per module."""
    folder = tmp_path_factory.mktemp("hosted-app")
    turn_log = folder / "turns.jsonl"
    log = folder / "server.log"
    print(f"\n[browser tests] app server log: {log}")
    env = {"EXPLORER_TURN_LOG": str(turn_log), FIGURES_FILE_ENV: str(server_figures_file)}
    with streamlit_server(log, env=env) as url:
        yield HostedApp(url, log, turn_log)


@pytest.fixture(scope="session")
def chromium() -> Iterator[object]:
    """One headless Debian Chromium for the session (Playwright's own browser download does not work here); each test
    module opens its own contexts in it. Skips, loudly, where the browser or playwright is missing."""
    missing = browser_missing()
    if missing:
        pytest.skip(f"BROWSER TEST SKIPPED, the app was NOT checked in a browser: {missing}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
