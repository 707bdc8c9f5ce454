"""A device owner in a thread of the test's own process, on a free loopback port: the same HTTP and events as the
owner the app starts as a child process, without the seconds a fresh process spends importing torch, and with the
test's patches (the device figures measured once) in force. Fresh for every test that asks for the device."""

from __future__ import annotations

import threading
import time

import uvicorn

from explorer.hosting.client import DeviceLink, OwnerClient, free_port
from explorer.hosting.settings import HostedPolicy, warming_on
from explorer.owner.server import create_app
from explorer.owner.state import Owner


class OwnerInThread:
    def __init__(self, policy: HostedPolicy | None = None, token: str | None = None) -> None:
        self.owner = Owner(policy)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token
        config = uvicorn.Config(create_app(self.owner, token), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-owner", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the test's device owner did not start")
            time.sleep(0.01)

    def client(self) -> OwnerClient:
        return OwnerClient(self.url, self.token)

    def link(self) -> DeviceLink:
        return DeviceLink(self.client())

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)


class LazyOwners:
    """What the session's autouse fixture patches in for `DeviceLink.from_env`: an owner started on the first ask, in
    a thread; each test's own are stopped at its end (`stop_since`), a module fixture's at the session's end."""

    def __init__(self) -> None:
        self.started: list[OwnerInThread] = []

    @property
    def latest(self) -> Owner:
        """The owner the test's app reached last (a test's own, once it sent a job)."""
        return self.started[-1].owner

    def stop_since(self, count: int) -> None:
        for owner in self.started[count:]:
            owner.stop()
        del self.started[count:]

    def link(self, env: object = None) -> DeviceLink:
        owner = OwnerInThread()
        if warming_on():  # as `explorer.owner.server.serve` does (the tests switch it off, tests/conftest.py)
            owner.owner.warm_up()
        self.started.append(owner)
        return owner.link()

    def owner(self) -> Owner:
        """The owner this test's app reaches, started now if no job has asked yet: a test may put a model it built
        already in its store (`owner().models[(name, device, dtype)] = lm`), as a first load would leave it."""
        from explorer.ui.device_link import device_link

        device_link()  # the app's own cached link: this test's owner from here on
        return self.started[-1].owner

    def stop(self) -> None:
        for owner in self.started:
            owner.stop()


class OwnersOfATest:
    """One test's view of the owners: those started during it (a module fixture's, started before, are not its)."""

    def __init__(self, owners: LazyOwners) -> None:
        self.owners, self.since = owners, len(owners.started)

    @property
    def started(self) -> list[OwnerInThread]:
        return self.owners.started[self.since :]

    @property
    def latest(self) -> Owner:
        """The owner the test's app reached last (a test's own, once it sent a job)."""
        return self.started[-1].owner

    def owner(self) -> Owner:
        """The owner this test's app reaches, started now if no job has asked yet (`LazyOwners.owner`)."""
        return self.owners.owner()

    def stop(self) -> None:
        self.owners.stop_since(self.since)
