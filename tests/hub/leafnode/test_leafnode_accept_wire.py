"""edged's leafnode port on the wire, line by line next to nats-server's: the first INFO, the answer to a
CONNECT (the `connect_info` INFO, then the interest dump with `$LDS.`), the authorization timeout, a
first protocol that is not CONNECT or a bad password, a duplicate leaf."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import nats
import pytest

from tests.hub.leafnode.test_leafnode_accept import HUBS
from tests.support.aio import run
from tests.support.servers import ServerProcess, free_port

CONF = """
leafnodes { port: %(leaf_port)d, authorization { users: [ {user: leaf, password: s3cret, account: APP} ], timeout: 1 } }
accounts {
  APP { users: [ {user: app, password: app} ] }
}
"""

# the INFO fields a leaf reads (leafnode-protocol.md §1.3); values that differ per server are masked
INFO_KEYS = ("auth_required", "client_id", "headers", "info_on_connect", "leafnode_urls", "max_payload", "nonce",
             "port", "server_id", "server_name", "version")


class LeafWire:
    """A raw leafnode connection: what the server sends, line by line."""

    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w

    @classmethod
    async def open(cls, port: int) -> LeafWire:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    async def line(self, timeout: float = 3.0) -> str:
        b = await asyncio.wait_for(self.r.readline(), timeout)
        if not b:
            raise EOFError
        return b.decode().rstrip("\r\n")

    async def lines_until(self, pred: Callable[[str], bool], timeout: float = 3.0) -> list[str]:
        out: list[str] = []
        while True:
            ln = await self.line(timeout)
            out.append(ln)
            if pred(ln):
                return out

    async def dump(self) -> list[str]:
        """What the server sent up to its PONG to our PING (after a CONNECT: its interest dump)."""
        self.send(b"PING\r\n")
        return [ln for ln in await self.lines_until(lambda ln: ln == "PONG") if ln not in ("PING", "PONG")]

    def send(self, data: bytes) -> None:
        self.w.write(data)

    async def closed(self, timeout: float = 3.0) -> bool:
        try:
            while await asyncio.wait_for(self.r.read(4096), timeout):
                pass
            return True
        except ConnectionError:  # closed with unread data: a reset
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.w.close()


def info_of(line: str) -> dict[str, Any]:
    assert line.startswith("INFO ")
    return json.loads(line[5:])


@pytest.fixture(params=HUBS)
def hub(request: pytest.FixtureRequest, start_server: Callable[..., ServerProcess]) -> ServerProcess:
    port = free_port()
    srv = start_server(request.param, config=CONF % {"leaf_port": port})
    srv.leaf_port = port  # type: ignore[attr-defined]
    return srv


def connect(name: str = "raw1", user: str = "leaf", password: str = "s3cret") -> bytes:
    c = {"version": "2.10.0", "user": user, "pass": password, "name": name, "headers": True,
         "remote_account": "X", "protocol": 1}
    return b"CONNECT " + json.dumps(c).encode() + b"\r\n"


def test_first_info(hub: ServerProcess) -> None:
    async def main() -> dict[str, Any]:
        lw = await LeafWire.open(hub.leaf_port)  # type: ignore[attr-defined]
        info = info_of(await lw.line())
        lw.close()
        return info

    info = run(main())
    missing = [k for k in INFO_KEYS if k not in info]
    assert missing == []
    assert info["auth_required"] is True and info["info_on_connect"] is True and info["headers"] is True
    assert len(info["nonce"]) == 15 and info["client_id"] > 0
    assert info["port"] == hub.leaf_port  # type: ignore[attr-defined]
    assert info["leafnode_urls"] == [f"{info['host']}:{hub.leaf_port}"]  # type: ignore[attr-defined]
    assert "connect_info" not in info


def test_connect_answer(hub: ServerProcess) -> None:
    async def main() -> tuple[dict[str, Any], list[str]]:
        lw = await LeafWire.open(hub.leaf_port)  # type: ignore[attr-defined]
        await lw.line()
        lw.send(connect())
        second = info_of(await lw.line())
        rest = await lw.dump()
        lw.close()
        return second, rest

    second, rest = run(main())
    assert (second["connect_info"], second["remote_account"]) == (True, "APP")
    assert "nonce" not in second and not second.get("acc_is_sys")
    assert all(ln.startswith("LS+ ") for ln in rest)
    assert len([ln for ln in rest if ln.startswith("LS+ $LDS.")]) == 1


def test_authorization_timeout(hub: ServerProcess) -> None:
    async def main() -> tuple[str, bool]:
        lw = await LeafWire.open(hub.leaf_port)  # type: ignore[attr-defined]
        await lw.line()
        err = await lw.line(timeout=4)
        return err, await lw.closed()

    assert run(main()) == ("-ERR 'Authentication Timeout'", True)


@pytest.mark.parametrize("first", [b"PING\r\n", b"LS+ foo\r\n", connect(password="nope")])
def test_authorization_violation(hub: ServerProcess, first: bytes) -> None:
    async def main() -> tuple[str, bool]:
        lw = await LeafWire.open(hub.leaf_port)  # type: ignore[attr-defined]
        await lw.line()
        lw.send(first)
        err = await lw.line()
        return err, await lw.closed()

    assert run(main()) == ("-ERR 'Authorization Violation'", True)


def test_duplicate_leaf_replaces_the_old_connection(hub: ServerProcess) -> None:
    async def main() -> tuple[list[str], bool]:
        old = await LeafWire.open(hub.leaf_port)  # type: ignore[attr-defined]
        await old.line()
        old.send(connect("same"))
        await old.dump()
        new = await LeafWire.open(hub.leaf_port)  # type: ignore[attr-defined]
        await new.line()
        new.send(connect("same"))
        await new.dump()
        said = await old.lines_until(lambda ln: ln.startswith("-ERR"))
        gone = await old.closed()
        new.send(b"PING\r\n")
        alive = "PONG" in await new.lines_until(lambda ln: ln == "PONG")
        new.close()
        return [said[-1]], gone and alive

    assert run(main()) == (["-ERR 'Duplicate Remote LeafNode Connection'"], True)


PERMS_CONF = """
leafnodes { port: %(leaf_port)d }
accounts { APP { users: [
  {user: leaf, password: s3cret, permissions: { publish: { allow: ["up.>"] }, subscribe: { allow: ["down.>"] } } },
  {user: app, password: app}
] } }
"""


@pytest.fixture(params=HUBS)
def perms_hub(request: pytest.FixtureRequest, start_server: Callable[..., ServerProcess]) -> ServerProcess:
    port = free_port()
    srv = start_server(request.param, config=PERMS_CONF % {"leaf_port": port})
    srv.leaf_port = port  # type: ignore[attr-defined]
    return srv


def test_permissions_in_connect_info_and_enforced_by_the_hub(perms_hub: ServerProcess) -> None:
    """The hub tells the leaf its import/export, delivers only what the leaf may import, and closes a leaf
    that asks for a literal subject outside it."""

    async def main() -> tuple[Any, ...]:
        lw = await LeafWire.open(perms_hub.leaf_port)  # type: ignore[attr-defined]
        await lw.line()
        lw.send(connect())
        second = info_of(await lw.line())
        await lw.dump()
        lw.send(b"LS+ >\r\nPING\r\n")
        await lw.lines_until(lambda ln: ln == "PONG")
        nc = await nats.connect(f"nats://app:app@127.0.0.1:{perms_hub.port}")
        await nc.publish("other.1", b"x")
        await nc.publish("down.1", b"y")
        await nc.flush()
        got = await lw.lines_until(lambda ln: ln.startswith("LMSG"))
        await nc.close()
        lw.send(b"LS+ other.lit\r\n")
        err = await lw.lines_until(lambda ln: ln.startswith("-ERR"))
        gone = await lw.closed()
        return second.get("import"), second.get("export"), got[-1], err[-1], gone

    imp, exp, lmsg, err, gone = run(main())
    assert (imp, exp) == ({"allow": ["down.>"]}, {"allow": ["up.>"]})
    assert lmsg == "LMSG down.1 1"
    assert (err, gone) == ("-ERR 'Permissions Violation for Subscription to \"other.lit\"'", True)


JS_CONF = """
jetstream { store_dir: "./js", domain: hub }
leafnodes { port: %(leaf_port)d }
accounts { APP { jetstream: enabled, users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] } }
"""


@pytest.mark.parametrize("hub_kind", HUBS)
def test_hub_keeps_its_api_from_a_leaf_of_another_domain(hub_kind: str,
                                                        start_server: Callable[..., ServerProcess]) -> None:
    """A leaf of domain `other` that asks for `$JS.API.>` and `$JS.hub.API.>` gets neither; the hub answers
    its own client once; the leaf learns where domain hub lives (`LS+ $JS.hub.API...`)."""
    leaf_port = free_port()
    hub = start_server(hub_kind, config=JS_CONF % {"leaf_port": leaf_port})

    async def main() -> tuple[Any, ...]:
        lw = await LeafWire.open(leaf_port)
        info = info_of(await lw.line())
        c = json.loads(connect()[8:])
        c["domain"] = "other"
        lw.send(b"CONNECT " + json.dumps(c).encode() + b"\r\n")
        await lw.line()
        dump = await lw.dump()
        lw.send(b"LS+ $JS.API.>\r\nLS+ $JS.hub.API.>\r\nLS+ probe\r\nPING\r\n")
        await lw.lines_until(lambda ln: ln == "PONG")
        nc = await nats.connect(f"nats://app:app@127.0.0.1:{hub.port}")
        a = json.loads((await nc.request("$JS.API.INFO", b"", timeout=2)).data)
        b = json.loads((await nc.request("$JS.hub.API.INFO", b"", timeout=2)).data)
        await nc.publish("probe", b"")
        await nc.flush()
        seen = await lw.lines_until(lambda ln: ln.startswith("LMSG"))
        await nc.close()
        lw.close()
        return (info.get("domain"), "LS+ $JS.hub.API.STREAM.>" in dump, a.get("domain"), b.get("domain"),
                [ln for ln in seen if ln.startswith(("LMSG", "HMSG"))])

    assert run(main()) == ("hub", True, "hub", "hub", ["LMSG probe 0"])


@pytest.mark.parametrize("hub_kind", HUBS)
def test_maximum_payload(hub_kind: str, start_server: Callable[..., ServerProcess]) -> None:
    leaf_port = free_port()
    start_server(hub_kind, config=f"max_payload: 1024\nleafnodes {{ port: {leaf_port} }}")

    async def main() -> tuple[str, bool]:
        lw = await LeafWire.open(leaf_port)
        await lw.line()
        lw.send(b'CONNECT {"name":"big","headers":true}\r\n')
        await lw.dump()
        lw.send(b"LMSG x 2000\r\n" + b"a" * 2000 + b"\r\n")
        err = await lw.lines_until(lambda ln: ln.startswith("-ERR"))
        return err[-1], await lw.closed()

    assert run(main()) == ("-ERR 'Maximum Payload Violation'", True)
