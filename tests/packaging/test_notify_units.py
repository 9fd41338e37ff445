"""The notify protocol's parts: addresses, the watchdog interval (WATCHDOG_USEC, WATCHDOG_PID), the
raw sender against a real datagram socket, the STATUS line's shape, the link doctor's arithmetic and
the store probe on a real SQLite file."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edged.appliance.doctor import DoctorSettings, Silence, duration_text
from edged.appliance.systemd import Notifier, one_line, raw_sender, socket_address, watchdog_interval
from storage.base import StoreClosedError
from storage.sqlite import SQLiteStore
from tests.packaging.notifysock import NotifySocket
from tests.support.servers import ROOT


def test_socket_address_abstract_and_path() -> None:
    assert socket_address("@foo/bar") == b"\0foo/bar"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


@pytest.mark.parametrize(("env", "expected"), [
    ({}, None),
    ({"WATCHDOG_USEC": "0"}, None),
    ({"WATCHDOG_USEC": "junk"}, None),
    ({"WATCHDOG_USEC": "30000000"}, 15.0),
    ({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "4242"}, 0.5),
    ({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "4243"}, None),  # meant for another process
    ({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "x"}, None),
])
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval(env, pid=4242) == expected


@given(st.integers(min_value=1, max_value=2**63))
def test_watchdog_interval_is_half(usec: int) -> None:
    assert watchdog_interval({"WATCHDOG_USEC": str(usec)}, pid=1) == usec / 2e6


@pytest.mark.parametrize("abstract", [False, True])
def test_raw_sender_reaches_a_real_socket(tmp_path: object, abstract: bool) -> None:
    ns = NotifySocket(str(tmp_path), abstract=abstract)
    try:
        n = Notifier({"NOTIFY_SOCKET": ns.env_value}, use_library=False)
        assert n.enabled and n.backend == "socket"
        assert n.send("READY=1", "STATUS=ready: 0 clients")
        assert ns.read(5) == {"READY": "1", "STATUS": "ready: 0 clients"}
    finally:
        ns.close()


def test_raw_sender_without_listener_reports_failure(tmp_path: object) -> None:
    assert raw_sender(os.path.join(str(tmp_path), "nobody.sock"))("READY=1") is False


def test_notifier_off_outside_systemd() -> None:
    n = Notifier({})
    assert not n.enabled and n.send("READY=1") is False


@given(st.text())
def test_status_text_is_one_line(text: str) -> None:
    line = one_line(text)
    assert "\n" not in line and "\r" not in line and line == line.strip()


@pytest.mark.parametrize(("s", "text"), [(0, "0s"), (59.4, "59s"), (600, "10m"), (7200, "2h"), (3 * 86400, "3d")])
def test_duration_text(s: float, text: str) -> None:
    assert duration_text(s) == text


def test_silence_counts_from_the_last_message() -> None:
    s = Silence()
    assert s.sample(1, 10, 100.0) == 0
    assert s.sample(1, 10, 160.0) == 60
    assert s.sample(1, 11, 170.0) == 0  # a message went through
    assert s.sample(1, 11, 800.0) == 630
    assert s.sample(2, 11, 801.0) == 0  # a new connection


def test_store_probe_commits_a_row(tmp_path: object) -> None:
    async def main() -> None:
        store = SQLiteStore(str(tmp_path))
        await store.open()
        await store.probe()
        await store.close()
        with pytest.raises(StoreClosedError):
            await store.probe()

    asyncio.run(main())
    db = next(os.path.join(str(tmp_path), n) for n in os.listdir(str(tmp_path)) if n.endswith(".sqlite3"))
    with sqlite3.connect(db) as c:
        (value,) = c.execute("SELECT value FROM meta WHERE key = 'probe'").fetchone()
    assert int(value) > 0


@pytest.mark.parametrize(("block", "expected"), [
    ({}, 600.0),
    ({"doctor": {"silent_after": "2m"}}, 120.0),
    ({"doctor": {"silent_after": 5}}, 5.0),
    ({"doctor": {"silent_after": 0}}, 0.0),
])
def test_doctor_settings(block: dict[str, object], expected: float) -> None:
    assert DoctorSettings.from_block(block).silent_after == expected


@pytest.mark.parametrize(("block", "error"), [
    ({"doctor": {"silent": "2m"}}, "unknown setting 'silent'"),
    ({"doctor": {"silent_after": True}}, "must be a duration"),
    ({"doctor": {"silent_after": -1}}, "must not be negative"),
    ({"doctor": "x"}, "expected a block"),
])
def test_doctor_settings_refused(block: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        DoctorSettings.from_block(block)


def test_edged_check_names_a_bad_doctor_setting(tmp_path: object) -> None:
    conf = os.path.join(str(tmp_path), "e.conf")
    with open(conf, "w") as f:
        f.write("edged { doctor { silent_afer: 1m } }\n")
    r = subprocess.run([sys.executable, "-m", "edged", "check", "-c", conf], capture_output=True, text=True,
                       cwd=str(ROOT))
    assert r.returncode == 1 and "edged { doctor }: unknown setting 'silent_afer'" in r.stderr, r.stderr
