"""JetStream API versioning, differential against nats-server (server/jetstream_versioning.go): the
`_nats.req.level` stream and consumer configs keep, the `_nats.ver` / `_nats.level` only responses carry,
`Nats-Required-Api-Level` answered with 10185, `api_lvl` in INFO, `api.level` in `$JS.API.INFO`, /jsz and
/varz. The level and version differ by design (nats-server 2.15 is at level 5, edged at edged.API_LEVEL):
each server's answers must agree with what that server says of itself, and everything else must be the same."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from typing import Any

import nats
import pytest

from edged import API_LEVEL, SERVER_VERSION
from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess, free_port

LEVEL_HDR = "Nats-Required-Api-Level"


@pytest.fixture(scope="module")
def servers() -> Any:
    """One JetStream server of each kind, with monitoring, for the whole module (each test uses its own
    stream names)."""
    procs = {k: ServerProcess(k, ["-js", "-sd", tempfile.mkdtemp(prefix="ver-")], http_port=free_port()).start()
             for k in KINDS}
    yield procs
    for p in procs.values():
        p.stop()


async def _req(nc: Any, subject: str, body: Any = b"", headers: dict[str, str] | None = None) -> dict[str, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=5, headers=headers)).data)


def _on_each(servers: dict[str, ServerProcess], scenario: Any) -> dict[str, Any]:
    async def one(p: ServerProcess) -> Any:
        nc = await nats.connect(p.url)
        try:
            return await scenario(nc)
        finally:
            await nc.close()
    return {k: run(one(p), timeout=60) for k, p in servers.items()}


def _self(nc: Any) -> tuple[str, str]:
    """(version, level) as the server's INFO line tells them: what `_nats.ver` / `_nats.level` must say."""
    info = nc._server_info
    return info["version"], str(info.get("api_lvl", 0))


def _levels(md: dict[str, str] | None, me: tuple[str, str]) -> dict[str, str]:
    """The metadata with the server's own version and level checked against its INFO and named instead."""
    out = dict(md or {})
    if "_nats.ver" in out:
        assert out["_nats.ver"] == me[0]
        out["_nats.ver"] = "<version>"
    if "_nats.level" in out:
        assert out["_nats.level"] == me[1]
        out["_nats.level"] = "<level>"
    return out


def test_stream_metadata_like_nats_server(servers: dict[str, ServerProcess]) -> None:
    """The level a config needs is stored, the server's version and level are only in responses (create,
    info, update; not the list), a client's own `_nats.` keys are replaced, its other keys kept, and an
    identical create is still idempotent."""
    async def scenario(nc: Any) -> dict[str, Any]:
        me = _self(nc)
        out: dict[str, Any] = {}
        cfg = {"name": "V1", "subjects": ["v1.>"], "metadata": {"owner": "ops", "_nats.ver": "9.9.9",
                                                                 "_nats.level": "77", "_nats.req.level": "9"}}
        r = await _req(nc, "$JS.API.STREAM.CREATE.V1", cfg)
        out["create"] = _levels(r["config"].get("metadata"), me)
        r = await _req(nc, "$JS.API.STREAM.INFO.V1")
        out["info"] = _levels(r["config"].get("metadata"), me)
        r = await _req(nc, "$JS.API.STREAM.LIST", {})
        out["list"] = [_levels(s["config"].get("metadata"), me) for s in r["streams"] if s["config"]["name"] == "V1"]
        r = await _req(nc, "$JS.API.STREAM.CREATE.V1", cfg)  # the same again: that stream
        out["again"] = (r.get("error"), _levels(r["config"].get("metadata"), me))
        r = await _req(nc, "$JS.API.STREAM.CREATE.V1", {**cfg, "metadata": {"owner": "dev"}})
        out["different"] = r.get("error")
        r = await _req(nc, "$JS.API.STREAM.UPDATE.V1", {"name": "V1", "subjects": ["v1.>"], "allow_msg_ttl": True})
        out["update ttl"] = _levels(r["config"].get("metadata"), me)
        r = await _req(nc, "$JS.API.STREAM.CREATE.V2", {"name": "V2", "subjects": ["v2"]})
        out["plain"] = _levels(r["config"].get("metadata"), me)
        return out

    res = _on_each(servers, scenario)
    ref = res["nats-server"]
    assert ref["create"] == {"owner": "ops", "_nats.req.level": "0", "_nats.ver": "<version>",
                             "_nats.level": "<level>"}
    assert ref["list"] == [{"owner": "ops", "_nats.req.level": "0"}]
    assert ref["update ttl"]["_nats.req.level"] == "1"
    assert res["edged"] == ref


def test_consumer_metadata_like_nats_server(servers: dict[str, ServerProcess]) -> None:
    """A consumer's `_nats.req.level` (1 for a pause), the dynamic keys in create and info replies only, and
    an identical create still idempotent."""
    async def scenario(nc: Any) -> dict[str, Any]:
        me = _self(nc)
        out: dict[str, Any] = {}
        await _req(nc, "$JS.API.STREAM.CREATE.VC", {"name": "VC", "subjects": ["vc"]})
        body = {"stream_name": "VC", "config": {"durable_name": "D", "ack_policy": "explicit",
                                                "metadata": {"team": "a", "_nats.level": "3"}}}
        r = await _req(nc, "$JS.API.CONSUMER.CREATE.VC.D", body)
        out["create"] = _levels(r["config"].get("metadata"), me)
        r = await _req(nc, "$JS.API.CONSUMER.INFO.VC.D")
        out["info"] = _levels(r["config"].get("metadata"), me)
        r = await _req(nc, "$JS.API.CONSUMER.LIST.VC", {})
        out["list"] = [_levels(c["config"].get("metadata"), me) for c in r["consumers"]]
        r = await _req(nc, "$JS.API.CONSUMER.CREATE.VC.D", {**body, "action": "create"})
        out["again"] = (r.get("error"), _levels(r["config"].get("metadata"), me))
        paused = {"stream_name": "VC", "config": {"durable_name": "P", "ack_policy": "explicit",
                                                  "pause_until": "2099-01-01T00:00:00Z"}}
        r = await _req(nc, "$JS.API.CONSUMER.CREATE.VC.P", paused)
        out["paused"] = _levels(r["config"].get("metadata"), me)
        return out

    res = _on_each(servers, scenario)
    ref = res["nats-server"]
    assert ref["create"] == {"team": "a", "_nats.req.level": "0", "_nats.ver": "<version>", "_nats.level": "<level>"}
    assert ref["list"] == [{"team": "a", "_nats.req.level": "0"}]
    assert ref["paused"]["_nats.req.level"] == "1"
    assert res["edged"] == ref


@pytest.mark.parametrize("subject,body", [
    ("$JS.API.INFO", b""),
    ("$JS.API.STREAM.CREATE.RL", b'{"name":"RL","subjects":["rl"]}'),
    ("$JS.API.STREAM.INFO.RL0", b""),
    ("$JS.API.STREAM.NAMES", b""),
    ("$JS.API.CONSUMER.CREATE.RL0.C", b'{"stream_name":"RL0","config":{"durable_name":"C"}}'),
    ("$JS.API.CONSUMER.INFO.RL0.NONE", b""),
    ("$JS.API.STREAM.MSG.GET.RL0", b'{"seq":1}'),
])
def test_required_api_level_like_nats_server(servers: dict[str, ServerProcess], subject: str, body: bytes) -> None:
    """A level above the server's, or not a number, is answered with 10185 in the request's response type
    before anything else is looked at (the stream need not exist); a level the server has goes through.
    Bad JSON in a consumer create is still 10025 first, as nats-server checks it before the level."""
    async def scenario(nc: Any) -> dict[str, Any]:
        level = int(_self(nc)[1])
        await _req(nc, "$JS.API.STREAM.CREATE.RL0", {"name": "RL0", "subjects": ["rl0"]})
        out = {"above": await _req(nc, subject, body, {LEVEL_HDR: "99"}),
               "junk": await _req(nc, subject, body, {LEVEL_HDR: "two"}),
               "next": (await _req(nc, subject, body, {LEVEL_HDR: str(level + 1)})).get("error"),
               "own": (await _req(nc, subject, body, {LEVEL_HDR: str(level)})).get("error", {}).get("err_code")}
        out["zero"] = (await _req(nc, subject, body, {LEVEL_HDR: "0"})).get("error", {}).get("err_code")
        if "CONSUMER.CREATE" in subject:
            out["bad json first"] = (await _req(nc, subject, b"{", {LEVEL_HDR: "99"}))["error"]["err_code"]
        await _req(nc, "$JS.API.STREAM.DELETE.RL")
        return out

    res = _on_each(servers, scenario)
    ref = res["nats-server"]
    assert ref["above"]["error"] == {"code": 412, "err_code": 10185, "description": "JetStream minimum api level "
                                                                                    "required"}
    assert ref["next"] == ref["above"]["error"]
    assert ref["own"] == ref["zero"] and ref["own"] != 10185
    assert res["edged"] == ref


def test_info_and_monitoring_report_the_level(servers: dict[str, ServerProcess]) -> None:
    """INFO's `api_lvl` (left out at level 0, as nats-server's omitempty does), `$JS.API.INFO` `api.level`,
    /jsz and /varz `api.level`, in nats-server's shape and with each server's own level; the /varz and
    /jsz fields nats-server 2.15 has (`config_digest`, `feature_flags`, `jetstream.config.strict`, /jsz
    `total`)."""
    async def scenario(nc: Any) -> dict[str, Any]:
        info = nc._server_info
        r = await _req(nc, "$JS.API.INFO")
        return {"info": (info["version"], info.get("api_lvl")), "api": r["api"]}

    res = _on_each(servers, scenario)
    ref, ed = res["nats-server"], res["edged"]
    assert isinstance(ref["info"][1], int) and ref["info"][1] >= 5
    assert ed["info"] == (SERVER_VERSION, API_LEVEL or None)
    assert list(ref["api"]) == list(ed["api"]) == ["level", "total", "errors"]
    assert (ref["api"]["level"], ed["api"]["level"]) == (ref["info"][1], API_LEVEL)
    docs: dict[str, dict[str, Any]] = {}
    for kind, p in servers.items():
        def get(path: str, port: int | None = p.http_port) -> Any:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as f:
                return json.loads(f.read())
        docs[kind] = {"varz": get("/varz"), "jsz": get("/jsz")}
    for kind, level in (("nats-server", ref["info"][1]), ("edged", API_LEVEL)):
        v, j = docs[kind]["varz"], docs[kind]["jsz"]
        assert v["jetstream"]["stats"]["api"]["level"] == j["api"]["level"] == level, kind
        assert list(j["api"]) == ["level", "total", "errors"], kind
        assert v["jetstream"]["config"]["strict"] is True and j["config"]["strict"] is True, kind
        assert j["total"] == 1, kind  # the accounts with JetStream ($G)
        assert v["config_digest"] == "", kind  # started without a config file
        assert set(v["feature_flags"]) == set(docs["nats-server"]["varz"]["feature_flags"]), kind
    assert docs["edged"]["varz"]["version"] == SERVER_VERSION
    assert not any(docs["edged"]["varz"]["feature_flags"].values())
