"""A fake Raspberry Pi sysfs/procfs tree (what hw/board.py reads) in a directory, for EDGED_HW_ROOT."""

from __future__ import annotations

from pathlib import Path

from hw import board


def make_pi(root: Path, *, model: str = "Raspberry Pi 4 Model B Rev 1.4", serial: str = "10000000abcdef01",
            temp_milli: int = 48312, throttled: str | None = "50005", cpuinfo_serial: bool = False,
            led: bool = True) -> Path:
    """The files of a Pi under `root`: device-tree strings end in NUL as on a real board."""
    def put(rel: str, data: bytes) -> None:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    put(board.MODEL, model.encode() + b"\0")
    if cpuinfo_serial:
        put(board.CPUINFO, f"processor\t: 0\nHardware\t: BCM2835\nSerial\t\t: {serial}\nModel\t\t: {model}\n".encode())
    else:
        put(board.SERIAL, serial.encode() + b"\0")
    put(board.THERMAL, f"{temp_milli}\n".encode())
    if throttled is not None:
        put(board.THROTTLED, f"{throttled}\n".encode())
    if led:
        put("sys/class/leds/ACT/trigger", b"none [mmc0] timer heartbeat\n")
        put("sys/class/leds/ACT/brightness", b"0\n")
    return root
