"""Board facts from fake sysfs/procfs trees (tests/support/fakeboard.py), the "not available" of each fact
off a Pi or with damaged files, and the `edged { hw }` settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from hw import board
from hw.board import Board
from hw.health import HwSettings, kv_key
from tests.support.fakeboard import make_pi


def test_a_pi_tree(tmp_path: Path) -> None:
    s = Board(str(make_pi(tmp_path))).sample(str(tmp_path))
    assert s.model == "Raspberry Pi 4 Model B Rev 1.4"
    assert s.serial == "10000000abcdef01"
    assert s.cpu_temp_c == 48.312
    assert s.throttled is not None and s.throttled.raw == 0x50005
    assert s.disk_total is not None and s.disk_free is not None and 0 <= s.disk_free <= s.disk_total
    d = s.as_dict()
    assert d["disk"]["used_bytes"] == s.disk_total - s.disk_free


def test_serial_from_cpuinfo_when_the_device_tree_has_none(tmp_path: Path) -> None:
    b = Board(str(make_pi(tmp_path, serial="00000000deadbeef", cpuinfo_serial=True)))
    assert b.serial() == "00000000deadbeef"


def test_nothing_is_there_off_a_pi(tmp_path: Path) -> None:
    b = Board(str(tmp_path))  # not the real root: vcgencmd is never asked
    assert b.vcgencmd == ""
    s = b.sample(str(tmp_path / "no-such-store"))
    assert (s.model, s.serial, s.cpu_temp_c, s.throttled, s.disk_total, s.disk_free) == (None,) * 6
    assert s.as_dict()["disk"]["used_bytes"] is None


def test_damaged_files_are_not_available(tmp_path: Path) -> None:
    make_pi(tmp_path)
    (tmp_path / board.THERMAL).write_text("hot\n")
    (tmp_path / board.THROTTLED).write_text("garbage\n")
    (tmp_path / board.MODEL).write_bytes(b"\0")
    b = Board(str(tmp_path))
    assert b.cpu_temp_c() is None and b.throttled() is None and b.model() is None


def test_vcgencmd_when_the_sysfs_file_is_missing(tmp_path: Path) -> None:
    make_pi(tmp_path, throttled=None)
    tool = tmp_path / "vcgencmd"
    tool.write_text("#!/bin/sh\n[ \"$1\" = get_throttled ] && echo throttled=0x20002\n")
    tool.chmod(0o755)
    assert Board(str(tmp_path), vcgencmd=str(tool)).throttled().raw == 0x20002  # type: ignore[union-attr]
    tool.write_text("#!/bin/sh\nexit 1\n")
    assert Board(str(tmp_path), vcgencmd=str(tool)).throttled() is None


def test_settings() -> None:
    assert not HwSettings.from_block({}, env={}).enabled
    s = HwSettings.from_block({"hw": {"interval": "2s", "led": "ACT", "watchdog": "/dev/watchdog",
                                      "kv_bucket": "pi_health"}}, env={"EDGED_HW_ROOT": "/tmp/fake"})
    assert s.enabled and s.interval == 2.0 and s.led == "ACT" and s.root == "/tmp/fake" and s.kv_bucket == "pi_health"
    assert not HwSettings.from_block({"hw": {"enabled": False}}, env={}).enabled
    for bad, says in (({"hw": {"colour": 1}}, "unknown setting"), ({"hw": {"interval": "0s"}}, "more than 0"),
                      ({"hw": {"kv_bucket": "a.b"}}, "not a valid bucket"), ({"hw": 3}, "expected a block"),
                      ({"hw": {"enabled": "yes"}}, "true or false"), ({"hw": {"led": 5}}, "must be a string")):
        with pytest.raises(ValueError, match=says):
            HwSettings.from_block(bad, env={})


def test_kv_keys_from_server_names() -> None:
    assert kv_key("pi-7") == "pi-7"
    assert kv_key("pi 7*>") == "pi_7__"
    assert kv_key("...") == "edged"
