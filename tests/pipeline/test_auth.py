"""The sources connect the way the options say: a token, and TLS verified against `tls_ca`, on both servers."""

from __future__ import annotations

import tempfile
from typing import Any

import nats
import pytest

from tests.pipeline.conftest import PIPELINE, run
from tests.support.identity.certs import make_pki
from tests.support.servers import ServerProcess

pytestmark = PIPELINE


@pytest.mark.parametrize("kind", ["nats-server", "edged"])
def test_token_over_tls(spark: Any, kind: str) -> None:
    pki = make_pki(tempfile.mkdtemp(prefix="pki-"))
    args = ["-js", "-sd", tempfile.mkdtemp(prefix="pl-"), "--auth", "s3cret",
            "--tls", "--tlscert", pki["server_cert"], "--tlskey", pki["server_key"]]
    with ServerProcess(kind, args) as srv:
        url = f"tls://127.0.0.1:{srv.port}"

        async def fill() -> None:
            import ssl

            ctx = ssl.create_default_context(cafile=pki["ca"])
            nc = await nats.connect(url, token="s3cret", tls=ctx)
            js = nc.jetstream()
            await js.add_stream(name="SEC", subjects=["sec.>"])
            for i in range(20):
                await js.publish(f"sec.{i}", b"%d" % i)
            await nc.close()

        run(fill())

        def read(**opts: str) -> list[int]:
            df = spark.read.format("jetstream").option("servers", url).option("stream", "SEC").options(**opts).load()
            return sorted(r.seq for r in df.select("seq").collect())

        assert read(token="s3cret", tls_ca=pki["ca"], partitions="2") == list(range(1, 21))
        with pytest.raises(Exception) as e:  # the server's certificate is not trusted without the CA
            read(token="s3cret", timeout="3")
        assert "cannot reach a NATS server" in str(e.value) or "NATS connection" in str(e.value)
        with pytest.raises(Exception) as e:
            read(token="wrong", tls_ca=pki["ca"])
        # nats-server says -ERR 'Authorization Violation' before it closes; edged over TLS closes (or resets)
        # without it being read, so the reader can only say the server closed the connection
        msg = str(e.value)
        if kind == "nats-server":
            assert "refused the credentials" in msg, msg
        else:
            assert any(w in msg for w in ("refused the credentials", "closed the connection",
                                          "Connection reset")), msg
