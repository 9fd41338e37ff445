"""Asset versioning rules (edged/jetstream/wire/versioning.py, after nats-server's jetstream_versioning.go) and
the config digest /varz reports: pure functions, no server."""

from __future__ import annotations

from pathlib import Path

from edged import API_LEVEL, SERVER_VERSION
from edged.jetstream.wire.versioning import (
    consumer_required_level,
    like_previous,
    refuses_required_level,
    stream_required_level,
    with_dynamic_metadata,
    with_static_stream_metadata,
)
from edged.routing.headers import make_headers
from edged.settings.config import load_options


def test_required_levels() -> None:
    assert stream_required_level({}) == 0
    assert stream_required_level({"allow_msg_ttl": True}) == 1
    assert stream_required_level({"subject_delete_marker_ttl": 5}) == 1
    assert stream_required_level({"allow_msg_ttl": True, "allow_atomic": True}) == 2
    assert stream_required_level({"persist_mode": "async"}) == 2
    assert stream_required_level({"allow_batched": True, "allow_msg_ttl": True}) == 4
    assert consumer_required_level({"ack_policy": "explicit"}) == 0
    assert consumer_required_level({"pause_until": "2099-01-01T00:00:00Z"}) == 1
    assert consumer_required_level({"pause_until": "0001-01-01T00:00:00Z"}) == 0
    assert consumer_required_level({"priority_policy": "overflow", "priority_groups": ["g"]}) == 1
    assert consumer_required_level({"ack_policy": "flow_control"}) == 4


def test_static_and_dynamic_metadata() -> None:
    cfg = with_static_stream_metadata({"name": "S", "metadata": {"a": "1", "_nats.ver": "x", "_nats.level": "9",
                                                                 "_nats.req.level": "7"}})
    assert cfg["metadata"] == {"a": "1", "_nats.req.level": "0"}
    shown = with_dynamic_metadata(cfg)
    assert shown["metadata"] == {"a": "1", "_nats.req.level": "0", "_nats.ver": SERVER_VERSION,
                                 "_nats.level": str(API_LEVEL)}
    assert cfg["metadata"] == {"a": "1", "_nats.req.level": "0"}  # the stored config is left alone
    # comparing with an asset stored without versioning keys (an older version) ignores them
    assert like_previous(cfg, {"name": "S", "metadata": {"a": "1"}}) == {"name": "S", "metadata": {"a": "1"}}
    assert like_previous(with_static_stream_metadata({"name": "S"}), {"name": "S"}) == {"name": "S"}


def test_required_level_header() -> None:
    def hdr(v: str) -> bytes:
        return make_headers([("Nats-Required-Api-Level", v)])
    assert not refuses_required_level(None) and not refuses_required_level(make_headers([("X", "1")]))
    assert not refuses_required_level(hdr(str(API_LEVEL))) and not refuses_required_level(hdr("0"))
    assert refuses_required_level(hdr(str(API_LEVEL + 1))) and refuses_required_level(hdr("abc"))


def test_config_digest(tmp_path: Path) -> None:
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    a.write_text("port: 4333\nmax_payload: 1MB\n")
    b.write_text("# the same settings\nmax_payload: 1MB\nport: 4333\n")
    da, db = load_options(str(a)).config_digest, load_options(str(b)).config_digest
    assert da.startswith("sha256:") and len(da) == 7 + 64 and da == db
    a.write_text("port: 4334\nmax_payload: 1MB\n")
    assert load_options(str(a)).config_digest != da
