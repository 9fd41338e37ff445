"""The backlog figures' arithmetic (edged/monitor/backlog.py) and how `edged status` shows them
(edged/appliance/status.py): rates over a window, drain estimates, unknowns kept unknown."""

from __future__ import annotations

import math

from edged.appliance.status import duration, render, server_url, size
from edged.goformat import ZERO_TIME
from edged.monitor.backlog import RateWindow, drain_seconds, finite, mean_size


def test_rate_over_the_window() -> None:
    w = RateWindow(window=10.0)
    assert w.rate() is None
    w.add(100.0, 0)
    assert w.rate() is None  # one sample is no rate
    w.add(100.5, 50)
    assert w.rate() is None  # too short a span to believe
    w.add(102.0, 200)
    assert w.rate() == 100.0
    for i in range(3, 30):  # old samples leave the window: the rate follows the recent pace
        w.add(100.0 + i, 200 + (i - 2) * 10)
    assert w.samples[-1][0] - w.samples[0][0] <= 11.0
    assert w.rate() == 10.0


def test_a_counter_going_back_starts_over() -> None:
    w = RateWindow()
    w.add(0.0, 1000)
    w.add(2.0, 1200)
    assert w.rate() == 100.0
    w.add(3.0, 5)  # the origin was recreated: its sequences start again
    assert w.rate() is None
    w.add(5.0, 25)
    assert w.rate() == 10.0


def test_drain_estimate() -> None:
    assert drain_seconds(0, None) == 0.0
    assert drain_seconds(-3, 5.0) == 0.0
    assert drain_seconds(1000, 250.0) == 4.0
    assert drain_seconds(1000, 0.0) is None  # nothing moving: no number
    assert drain_seconds(1000, None) is None
    assert math.isnan(finite(None)) and finite(2.5) == 2.5


def test_mean_size() -> None:
    assert mean_size(0, 0) == 0.0
    assert mean_size(4, 1000) == 250.0


def test_human_units() -> None:
    assert duration(None) == "-"
    assert duration(0.25) == "250ms"
    assert duration(12.34) == "12.3s"
    assert duration(245) == "4m05s"
    assert duration(2 * 3600 + 180) == "2h03m"
    assert duration(3 * 86400 + 4 * 3600) == "3d04h"
    assert size(512) == "512 B"
    assert size(1536) == "1.5 KiB"
    assert size(3 * 1024 * 1024) == "3.0 MiB"


def test_server_url() -> None:
    assert server_url(None, None) == "http://127.0.0.1:8222"
    assert server_url(None, 9000) == "http://127.0.0.1:9000"
    assert server_url("10.0.0.5:8222", None) == "http://10.0.0.5:8222"
    assert server_url("http://gw:8222/", None) == "http://gw:8222"


def test_table_shows_each_row() -> None:
    doc = {
        "leaf_remotes": [{"account": "APP", "url": "", "urls": ["nats://hub:7422"], "connected": False,
                          "rtt_seconds": None, "since": "2026-01-01T00:00:00Z", "connects": 1,
                          "last_error": "connection refused"}],
        "syncs": [{"account": "APP", "stream": "commands", "kind": "mirror", "origin": "commands",
                   "api": "$JS.hub.API", "syncing": True, "msgs_behind": 1200, "bytes_behind": 2048,
                   "oldest_age_seconds": 75.0, "last_contact": ZERO_TIME, "last_contact_seconds": 0.4,
                   "origin_seq": 10, "rate_msgs_per_second": 300.0, "drain_seconds": 4.0, "error": ""}],
        "origin_consumers": [],
    }
    text = render(doc)
    lines = text.splitlines()
    remote = next(ln for ln in lines if ln.startswith("APP ") and "DOWN" in ln)
    assert "connection refused" in remote and "nats://hub:7422" in remote
    row = next(ln for ln in lines if ln.startswith("APP > commands"))
    for cell in ("mirror", "$JS.hub.API", "syncing", "1200", "2.0 KiB", "1m15s", "400ms ago", "300/s", "4.0s"):
        assert cell in row, (cell, row)
    assert text.splitlines()[-1] == "  none"  # no hub consumers
