"""Board facts read from a sysfs/procfs root: model, serial, CPU temperature, throttling, disk space.

The root is `/` on a real board; tests (and a container) point it at a fake tree with the same paths
(`EDGED_HW_ROOT` or `edged { hw { root: ... } }`). Every fact that a board does not have is None
("not available"), never an error: edged runs the same on a Pi, another ARM board or a laptop.
`vcgencmd` is only asked on the real root, and only when the firmware's sysfs file is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from hw.throttle import Throttled, ThrottleParseError, parse

MODEL = "proc/device-tree/model"
SERIAL = "proc/device-tree/serial-number"
CPUINFO = "proc/cpuinfo"
THERMAL = "sys/class/thermal/thermal_zone0/temp"
THROTTLED = "sys/devices/platform/soc/soc:firmware/get_throttled"
VCGENCMD_TIMEOUT_S = 2.0


@dataclass
class Sample:
    model: str | None
    serial: str | None
    cpu_temp_c: float | None
    throttled: Throttled | None
    disk_path: str
    disk_total: int | None
    disk_free: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "serial": self.serial,
            "cpu_temp_c": self.cpu_temp_c,
            "throttled": self.throttled.as_dict() if self.throttled is not None else None,
            "disk": {"path": self.disk_path, "total_bytes": self.disk_total, "free_bytes": self.disk_free,
                     "used_bytes": (self.disk_total - self.disk_free)
                     if self.disk_total is not None and self.disk_free is not None else None},
        }


class Board:
    """Reads the facts under `root` (one read per call: nothing is cached, values change)."""

    def __init__(self, root: str = "/", vcgencmd: str | None = None) -> None:
        self.root = root or "/"
        self.real = os.path.realpath(self.root) == "/"
        self.vcgencmd = vcgencmd if vcgencmd is not None else (shutil.which("vcgencmd") or "") if self.real else ""

    def _read(self, rel: str) -> bytes | None:
        try:
            with open(os.path.join(self.root, rel), "rb") as f:
                return f.read(65536)
        except OSError:
            return None

    def _text(self, rel: str) -> str | None:
        raw = self._read(rel)
        if raw is None:
            return None
        text = raw.replace(b"\x00", b"").decode("utf-8", "replace").strip()  # device-tree strings end in NUL
        return text or None

    def model(self) -> str | None:
        return self._text(MODEL)

    def serial(self) -> str | None:
        s = self._text(SERIAL)
        if s:
            return s
        info = self._text(CPUINFO) or ""
        for line in info.splitlines():
            key, _, value = line.partition(":")
            if key.strip().lower() == "serial" and value.strip():
                return value.strip()
        return None

    def cpu_temp_c(self) -> float | None:
        t = self._text(THERMAL)
        if t is None:
            return None
        try:
            return int(t) / 1000.0  # millidegrees Celsius
        except ValueError:
            return None

    def throttled(self) -> Throttled | None:
        t = self._text(THROTTLED)
        if t is None and self.vcgencmd:
            try:
                r = subprocess.run([self.vcgencmd, "get_throttled"], capture_output=True, text=True,
                                   timeout=VCGENCMD_TIMEOUT_S, check=False)
                t = r.stdout if r.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired):
                t = None
        if t is None:
            return None
        try:
            return parse(t)
        except ThrottleParseError:
            return None

    @staticmethod
    def disk(path: str) -> tuple[int | None, int | None]:
        """(total, free) bytes of the filesystem holding `path` (the store), or (None, None)."""
        try:
            du = shutil.disk_usage(path)
        except OSError:
            return None, None
        return du.total, du.free

    def sample(self, disk_path: str) -> Sample:
        total, free = self.disk(disk_path)
        return Sample(model=self.model(), serial=self.serial(), cpu_temp_c=self.cpu_temp_c(),
                      throttled=self.throttled(), disk_path=disk_path, disk_total=total, disk_free=free)
