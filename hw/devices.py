"""The board's outputs: the ACT LED showing the leaf link's state, and the hardware watchdog fed while
edged is healthy. Both are off unless configured, and both go quiet (LED trigger restored, watchdog
disarmed with the magic close) when edged stops cleanly."""

from __future__ import annotations

import os

from edged.log import log


class Led:
    """`/sys/class/leds/<name>/{trigger,brightness}` under the hw root: on while the link is up."""

    def __init__(self, root: str, name: str) -> None:
        self.dir = os.path.join(root, "sys/class/leds", name)
        self.saved_trigger = ""
        self.state: bool | None = None
        self.error = ""

    def _write(self, leaf: str, text: str) -> bool:
        try:
            with open(os.path.join(self.dir, leaf), "w") as f:
                f.write(text)
            return True
        except OSError as e:
            if not self.error:
                log.warning("LED %s not usable: %s", self.dir, e.strerror)
            self.error = e.strerror or str(e)
            return False

    def start(self) -> None:
        try:
            with open(os.path.join(self.dir, "trigger")) as f:
                text = f.read()
        except OSError as e:
            self.error = e.strerror or str(e)
            log.warning("LED %s not available: %s", self.dir, self.error)
            return
        # the active trigger is the one in brackets: "none [mmc0] timer"
        for word in text.split():
            if word.startswith("[") and word.endswith("]"):
                self.saved_trigger = word[1:-1]
        self._write("trigger", "none")

    def show(self, up: bool) -> None:
        if up != self.state and self._write("brightness", "1" if up else "0"):
            self.state = up

    def stop(self) -> None:
        if self.saved_trigger:
            self._write("trigger", self.saved_trigger)


class Watchdog:
    """A hardware watchdog device (e.g. /dev/watchdog): opened at start, a byte written per feed, and 'V'
    (the magic close) on a clean stop so the board is not reset when edged is stopped on purpose."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None
        self.feeds = 0
        self.error = ""

    def start(self) -> None:
        try:
            self.fd = os.open(self.path, os.O_WRONLY)
        except OSError as e:
            self.error = e.strerror or str(e)
            log.error("Hardware watchdog %s not opened: %s", self.path, self.error)

    def feed(self) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, b"\0")
            self.feeds += 1
        except OSError as e:
            self.error = e.strerror or str(e)
            log.error("Hardware watchdog %s not fed: %s", self.path, self.error)

    def stop(self) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, b"V")
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None
