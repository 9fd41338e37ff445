"""A real systemd notify socket for tests: an AF_UNIX datagram socket bound where $NOTIFY_SOCKET points
(a path, or `@name` in the abstract namespace), read one message at a time as systemd reads them."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable


class NotifySocket:
    def __init__(self, directory: str, abstract: bool = False) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"edged-test-{os.getpid()}-{id(self)}"
            self.sock.bind(b"\0" + name.encode())
            self.env_value = "@" + name
        else:
            path = os.path.join(directory, "notify.sock")
            self.sock.bind(path)
            self.env_value = path
        self.messages: list[dict[str, str]] = []

    def read(self, timeout: float) -> dict[str, str] | None:
        """The next message as a dict of its fields, or None after `timeout` seconds."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return None
        fields = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
        self.messages.append(fields)
        return fields

    def wait_for(self, key: str, value: str | None = None, timeout: float = 20.0) -> dict[str, str]:
        """Read until a message has `key` (= `value` if given); the messages before it stay in `messages`."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            m = self.read(left)
            if m is not None and key in m and (value is None or m[key] == value):
                return m
        raise AssertionError(f"no {key}{'=' + value if value else ''} in {timeout}s; got {self.messages}")

    def wait_status(self, pred: Callable[[str], bool], timeout: float = 30.0) -> str:
        """Read until a STATUS= text satisfies `pred` (STATUS is refreshed when it changes)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            m = self.read(left)
            if m is not None and "STATUS" in m and pred(m["STATUS"]):
                return m["STATUS"]
        raise AssertionError(f"no such STATUS in {timeout}s; got {[m.get('STATUS') for m in self.messages]}")

    def close(self) -> None:
        self.sock.close()
