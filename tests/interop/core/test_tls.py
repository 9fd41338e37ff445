"""TLS on the client port, differential: server cert, client-cert verification, handshake_first."""

from __future__ import annotations

import ssl
from typing import Any

import nats
import pytest

from tests.support.aio import run
from tests.support.servers import KINDS, ServerProcess


def ctx(pki: dict[str, str], client_cert: bool = False) -> ssl.SSLContext:
    c = ssl.create_default_context(cafile=pki["ca"])
    if client_cert:
        c.load_cert_chain(pki["client_cert"], pki["client_key"])
    return c


def tls_conf(pki: dict[str, str], extra: str = "") -> str:
    return (f'tls {{\n  cert_file: "{pki["server_cert"]}"\n  key_file: "{pki["server_key"]}"\n'
            f'  ca_file: "{pki["ca"]}"\n  {extra}\n}}\n')


async def attempt(url: str, **kw: Any) -> str:
    """What one TLS client gets: the message it sent to itself, or the error. With TLS 1.3 the server
    checks the client's certificate after the client's side of the handshake is done, so a refusal can
    arrive after connect() returned: an error on the first round trip counts as refused too."""
    try:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3, **kw)
    except Exception as e:
        return f"error: {type(e).__name__}"
    try:
        sub = await nc.subscribe("t")
        await nc.publish("t", b"over tls")
        msg = await sub.next_msg(2)
        return msg.data.decode()
    except Exception as e:
        return f"error: {type(e).__name__}"
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", KINDS)
def test_tls_server_cert(kind: str, pki: dict[str, str]) -> None:
    with ServerProcess(kind, config=tls_conf(pki)) as s:
        async def main() -> list[str]:
            return [await attempt(f"tls://127.0.0.1:{s.port}", tls=ctx(pki)),
                    await attempt(f"tls://127.0.0.1:{s.port}", tls=ssl.create_default_context())]

        got = run(main())
    assert got[0] == "over tls"
    assert got[1].startswith("error"), got


@pytest.mark.parametrize("kind", KINDS)
def test_tls_verify_requires_client_cert(kind: str, pki: dict[str, str]) -> None:
    with ServerProcess(kind, config=tls_conf(pki, "verify: true")) as s:
        async def main() -> list[str]:
            return [await attempt(f"tls://127.0.0.1:{s.port}", tls=ctx(pki, client_cert=True)),
                    await attempt(f"tls://127.0.0.1:{s.port}", tls=ctx(pki))]

        got = run(main())
    assert got[0] == "over tls"
    assert got[1].startswith("error"), got


@pytest.mark.parametrize("kind", KINDS)
def test_tls_handshake_first(kind: str, pki: dict[str, str]) -> None:
    with ServerProcess(kind, config=tls_conf(pki, "handshake_first: true")) as s:
        async def main() -> list[str]:
            return [await attempt(f"tls://127.0.0.1:{s.port}", tls=ctx(pki), tls_handshake_first=True)]

        got = run(main())
    assert got == ["over tls"]


@pytest.mark.parametrize("kind", KINDS)
def test_tls_flags(kind: str, pki: dict[str, str]) -> None:
    args = ["--tls", "--tlscert", pki["server_cert"], "--tlskey", pki["server_key"]]
    with ServerProcess(kind, args) as s:
        got = run(attempt(f"tls://127.0.0.1:{s.port}", tls=ctx(pki)))
    assert got == "over tls"
