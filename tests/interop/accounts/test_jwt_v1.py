"""Operator mode with v1-format JWTs (operator, accounts, users minted here as the older nsc wrote
them), on edged and on nats-server: both start with them, `edged check` passes them, and clients
connect with v1 user creds, are refused with a forged one, and get the user's permissions."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats
import pytest

from edged.security.creds import write_creds_file
from tests.support.aio import run
from tests.support.identity.jwt_v1 import V1Operator, b64
from tests.support.servers import KINDS, ROOT, ServerProcess


async def try_connect(url: str, **kw: Any) -> str:
    try:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3, **kw)
    except Exception as e:  # nats-py raises several error types for a refused connect
        return str(e) or type(e).__name__
    await nc.close()
    return "ok"


def creds(tmp_path: Path, name: str, user: tuple[str, Any]) -> str:
    token, kp = user
    path = str(tmp_path / f"{name}.creds")
    write_creds_file(path, token, kp.seed)
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_v1_operator_account_and_user_jwts(kind: str, tmp_path: Path) -> None:
    op = V1Operator()
    plain = creds(tmp_path, "plain", op.user())
    via_signer = creds(tmp_path, "signer", op.user(signer=op.app_signer))
    limited = creds(tmp_path, "limited", op.user(pub={"allow": ["ok.>"]}))
    token, kp = op.user()
    head, body, _ = token.split(".")
    forged = creds(tmp_path, "forged", (f"{head}.{body}.{b64(kp.sign(body.encode()))}", kp))  # not APP's signature
    with ServerProcess(kind, config=op.config()) as s:
        async def main() -> list[Any]:
            res: list[Any] = [await try_connect(s.url, user_credentials=p) for p in (plain, via_signer, forged)]
            a = await nats.connect(s.url, user_credentials=plain)
            b = await nats.connect(s.url, user_credentials=via_signer)
            sub = await b.subscribe("greet")
            await b.flush()
            await a.publish("greet", b"hello")
            res.append((await sub.next_msg(timeout=5)).data)
            errs: list[str] = []

            async def on_err(e: Exception) -> None:
                errs.append(str(e))

            c = await nats.connect(s.url, user_credentials=limited, error_cb=on_err, allow_reconnect=False)
            await c.publish("ok.1", b"")
            await c.publish("no.1", b"")
            await c.flush()
            for _ in range(50):
                if errs:
                    break
                await asyncio.sleep(0.02)
            res.append(errs)
            for nc in (a, b, c):
                await nc.close()
            return res

        got = run(main())
    assert got[0:2] == ["ok", "ok"], got
    assert "Authorization Violation" in got[2], got
    assert got[3] == b"hello"
    assert len(got[4]) == 1 and 'permissions violation for publish to "no.1"' in got[4][0].lower(), got


def test_edged_check_passes_a_v1_operator_config(tmp_path: Path) -> None:
    (tmp_path / "op.conf").write_text(V1Operator().config())
    r = subprocess.run([sys.executable, "-m", "edged", "check", "-c", "op.conf"], capture_output=True, text=True,
                       cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=30)
    assert r.returncode == 0 and "is valid" in r.stdout, r.stderr
