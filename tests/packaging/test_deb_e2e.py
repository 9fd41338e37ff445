"""The .deb end to end, as root (`make test-deb`, and `make test-all`): built twice to the same bytes,
lintian without errors, then installed into a Debian bookworm root booted by systemd-nspawn: the unit
becomes active only on READY=1, `systemctl reload` works, a hung event loop is restarted by the watchdog,
an upgrade and a reinstall keep the store and the edited conffile, remove keeps the store, purge removes
it and the user. The same package in a booted Debian 13 (trixie) root. arm64 and armhf bookworm roots and
an armhf trixie root under qemu-user: the package installs and runs, and a client publishes and reads back."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import nats
import nkeys
import pytest

from edged.appliance import bundle, fleet
from edged.security.creds import format_creds
from edged.security.jwt import encode, new_keypair
from tests.packaging.nspawn import (
    Booted,
    ensure_binfmt,
    ensure_root,
    load_build_deb,
    missing_tools,
    run_in_root,
)
from tests.support.aio import run
from tests.support.identity.certs import make_pki
from tests.support.servers import ROOT, ServerProcess, free_port, wait_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(os.geteuid() != 0, reason="the package tests run as root (make test-deb)"),
]

build_deb = load_build_deb()
VERSION = build_deb.version()


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def debs() -> dict[str, Path]:
    """amd64, arm64 and armhf packages of this tree, and an amd64 one with a later version (the upgrade)."""
    if missing_tools():
        pytest.fail(f"missing tools {missing_tools()}: run `make test-deb` (it installs them)")
    out = Path(tempfile.mkdtemp(prefix="debs-"))
    work = ROOT / "build" / "deb"
    return {"amd64": build_deb.build("amd64", out, work), "arm64": build_deb.build("arm64", out, work),
            "armhf": build_deb.build("armhf", out, work),
            "upgrade": build_deb.build("amd64", out / "up", work, ver=VERSION + "+1")}


def test_build_is_reproducible_and_lintian_clean(debs: dict[str, Path], tmp_path: Path) -> None:
    again = build_deb.build("amd64", tmp_path, ROOT / "build" / "deb")
    assert _sha(again) == _sha(debs["amd64"]), "two builds of one tree differ"
    # from a cold cache: wheels downloaded again, msgspec cross-compiled again for armhf
    cold = build_deb.build("armhf", tmp_path / "cold", tmp_path / "work")
    assert _sha(cold) == _sha(debs["armhf"]), "the armhf package differs when built from scratch"
    for arch in ("amd64", "arm64", "armhf"):
        r = subprocess.run(["lintian", "--tag-display-limit", "0", str(debs[arch])], capture_output=True, text=True)
        errors = [ln for ln in r.stdout.splitlines() if ln.startswith("E:")]
        assert not errors, "\n".join(errors)
        assert debs[arch].name == f"edged_{VERSION}_{arch}.deb"
    # armhf has msgspec for bookworm's 3.11 and trixie's 3.13 only: dpkg must refuse a 3.12 python3
    depends = {a: subprocess.run(["dpkg-deb", "-f", str(debs[a]), "Depends"], capture_output=True, text=True,
                                 check=True).stdout for a in ("amd64", "armhf")}
    assert "python3 (>= 3.11), python3 (<< 3.14), python3 (<< 3.12) | python3 (>= 3.13)," in depends["armhf"]
    assert "python3 (>= 3.11), python3 (<< 3.14), systemd" in depends["amd64"], depends["amd64"]


async def _publish(port: int, n: int) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        js = nc.jetstream()
        await js.add_stream(name="T", subjects=["t.>"])
        for i in range(n):
            ack = await js.publish(f"t.{i}", f"m{i}".encode())
            assert ack.stream == "T"
    finally:
        await nc.close()


async def _stored(port: int) -> list[bytes]:
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        js = nc.jetstream()
        info = await js.stream_info("T")
        out = []
        for seq in range(1, info.state.last_seq + 1):
            out.append((await js.get_msg("T", seq)).data)
        return out
    finally:
        await nc.close()


def _creds_text(expires_in: float) -> str:
    account = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    user = new_keypair(nkeys.PREFIX_BYTE_USER)
    claims = {"sub": user.public_key.decode(), "exp": int(time.time() + expires_in), "nats": {"type": "user"}}
    return format_creds(encode(claims, account), user.seed)


def _show(c: Booted, prop: str) -> str:
    return c.run(["systemctl", "show", "-p", prop, "--value", "edged"]).stdout.strip()


def _wait(what: str, pred, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out: {what}")


def test_install_run_reload_watchdog_upgrade_purge_in_booted_bookworm(debs: dict[str, Path], tmp_path: Path) -> None:
    root = ensure_root("amd64")
    port, http = free_port(), free_port()
    # a provisioning bundle with a CA, read by the installed package on Debian's cryptography (38)
    acc = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    jwt, seed = fleet.mint_user(acc, acc.public_key.decode(), "dev1", {}, 86400)
    (tmp_path / "pki").mkdir()
    with open(make_pki(str(tmp_path / "pki"))["ca"], encoding="ascii") as f:
        ca = f.read()
    bundle.write(bundle.make("dev1", ["tls://127.0.0.1:7422"], jwt, seed, domain="edge", ca_pem=ca),
                 str(tmp_path / "bundle"))
    binds = {str(debs["amd64"].parent): "/dist", str(debs["upgrade"].parent): "/dist-up",
             str(tmp_path / "bundle"): "/bundle"}
    with Booted(root, binds, str(tmp_path / "boot.log")) as c:
        # flags appended to ExecStart by a drop-in, the watchdog made short, the loop-blocking aid enabled
        c.write("/etc/systemd/system/edged.service.d/test.conf",
                f"[Service]\nEnvironment=\"EDGED_OPTS=-a 127.0.0.1 -p {port} -m {http}\"\n"
                "Environment=EDGED_DEBUG_HANG=1\nWatchdogSec=6s\n")
        c.run(["apt-get", "install", "-y", "-q", f"/dist/{debs['amd64'].name}"])
        # installed, started, active only after READY=1 (Type=notify)
        assert c.run(["systemctl", "is-active", "edged"]).stdout.strip() == "active"
        assert _show(c, "Type") == "notify"
        assert _show(c, "StatusText").startswith("ready: "), _show(c, "StatusText")
        assert c.run(["edged", "--version"]).stdout.startswith(f"edged {VERSION} ")
        assert c.sh("stat -c '%U %a' /etc/edged/creds /var/lib/edged").split("\n")[:2] == ["edged 700", "edged 750"]
        assert 'EDGED_DOMAIN: ""' in c.sh("cat /etc/edged/provisioned.conf")  # ready for edged provision
        assert c.sh("ps -o user= -p $(systemctl show -p MainPID --value edged) 2>/dev/null || "
                    "stat -c %U /proc/$(systemctl show -p MainPID --value edged)").strip() == "edged"
        wait_port(port)
        run(_publish(port, 5))
        assert c.sh("ls /var/lib/edged/jetstream").strip()
        got = c.sh("python3 -I -c 'import sys; sys.path[0:0] = [\"/usr/lib/edged\", \"/usr/lib/edged/vendor/py3\", "
                   "\"/usr/lib/edged/vendor/cp311\"]; import cryptography; from edged.appliance import bundle; "
                   "b = bundle.read(\"/bundle\"); print(cryptography.__version__, b.device, b.domain, bool(b.ca_pem))'")
        assert got.split() == ["38.0.4", "dev1", "edge", "True"], got
        journal = c.sh("journalctl -u edged --no-pager -o cat")
        assert "through python3-systemd" in journal, journal[-2000:]
        warnings = c.sh("journalctl -u edged --no-pager -o cat -p warning")  # levels reach journald
        assert "EDGED_DEBUG_HANG=1" in warnings and "Server is ready" not in warnings, warnings
        score = c.sh("systemd-analyze security edged --no-pager | tail -n 1")
        print("systemd-analyze security:", score.strip())

        # systemctl reload: RELOADING=1 ... READY=1, same process
        pid = _show(c, "MainPID")
        c.run(["systemctl", "reload", "edged"])
        assert "Reloaded server configuration" in c.sh("journalctl -u edged --no-pager -o cat")
        assert _show(c, "MainPID") == pid and c.sh("systemctl is-active edged").strip() == "active"

        # a blocked event loop: no WATCHDOG=1, systemd kills and restarts edged; the store survives
        c.run(["systemctl", "kill", "-s", "WINCH", "edged"])
        _wait("a restart by the watchdog", lambda: _show(c, "NRestarts") == "1"
              and c.sh("systemctl is-active edged", check=False).strip() == "active", timeout=90)
        assert _show(c, "MainPID") != pid
        assert "watchdog timeout" in c.sh("journalctl -u edged --no-pager").lower()
        wait_port(port)
        assert run(_stored(port)) == [f"m{i}".encode() for i in range(5)]

        # a hub link laid out as `edged provision` lays it out (provisioned.conf: the remote, EDGED_DOMAIN),
        # to a real nats-server; creds handed in by systemd (LoadCredential=), read from
        # $CREDENTIALS_DIRECTORY; the link doctor shows that they expire in two days in STATUS, and
        # /healthz stays 200 with the warning
        leaf_port = free_port()
        hub = ServerProcess("nats-server", config=f"leafnodes {{ port: {leaf_port} }}").start()
        try:
            c.write("/etc/edged/creds/hub.creds", _creds_text(2 * 86400 + 600))
            c.write("/etc/systemd/system/edged.service.d/creds.conf",
                    "[Service]\nLoadCredential=hub.creds:/etc/edged/creds/hub.creds\n")
            c.write("/etc/edged/provisioned.conf",
                    f'EDGED_DOMAIN: "edge"\nleafnodes {{ remotes: [ {{ url: "nats://127.0.0.1:{leaf_port}", '
                    'credentials: "$CREDENTIALS_DIRECTORY/hub.creds" } ] }\n')
            c.sh("chmod 600 /etc/edged/creds/hub.creds && systemctl daemon-reload && systemctl restart edged")
            creds_path = "/run/credentials/edged.service/hub.creds"
            _wait("the creds warning in STATUS", lambda: creds_path in _show(c, "StatusText"))
            status = _show(c, "StatusText")
            assert f"leaf 127.0.0.1:{leaf_port} up" in status and "expire in 2.0 days" in status, status
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=10) as r:
                assert r.status == 200
                assert [w for w in json.loads(r.read()).get("warnings", []) if creds_path in w and "2.0 days" in w]
        finally:
            hub.stop()

        # upgrade: the edited conffile and the store stay
        c.sh("echo '# edited by the admin' >> /etc/edged/edged.conf")
        c.run(["apt-get", "install", "-y", "-q", f"/dist-up/{debs['upgrade'].name}"])
        assert c.sh("dpkg-query -W -f '${Version}' edged") == VERSION + "+1"
        assert "# edited by the admin" in c.sh("cat /etc/edged/edged.conf")
        _wait("active after upgrade", lambda: c.sh("systemctl is-active edged", check=False).strip() == "active")
        wait_port(port)
        assert run(_stored(port)) == [f"m{i}".encode() for i in range(5)]

        # reinstall is idempotent
        c.run(["apt-get", "install", "-y", "-q", "--reinstall", f"/dist-up/{debs['upgrade'].name}"])
        _wait("active after reinstall", lambda: c.sh("systemctl is-active edged", check=False).strip() == "active")
        wait_port(port)
        assert len(run(_stored(port))) == 5

        # remove keeps the store and the configuration; purge removes them and the user
        c.run(["apt-get", "remove", "-y", "-q", "edged"])
        assert c.sh("systemctl is-active edged", check=False).strip() != "active"
        assert c.sh("ls /var/lib/edged/jetstream").strip()
        assert c.sh("test -f /etc/edged/edged.conf && echo yes").strip() == "yes"
        c.run(["apt-get", "purge", "-y", "-q", "edged"])
        assert c.sh("test -e /var/lib/edged || test -e /etc/edged || echo gone").strip() == "gone"
        assert c.run(["getent", "passwd", "edged"], check=False).returncode != 0


def test_installs_and_runs_on_booted_trixie(debs: dict[str, Path], tmp_path: Path) -> None:
    """Debian 13: python3 3.13 (the vendored msgspec for cp313), trixie's own cryptography and systemd."""
    root = ensure_root("amd64", "trixie")
    port, http = free_port(), free_port()
    with Booted(root, {str(debs["amd64"].parent): "/dist"}, str(tmp_path / "boot.log")) as c:
        c.write("/etc/systemd/system/edged.service.d/test.conf",
                f"[Service]\nEnvironment=\"EDGED_OPTS=-a 127.0.0.1 -p {port} -m {http}\"\n")
        c.run(["apt-get", "install", "-y", "-q", f"/dist/{debs['amd64'].name}"])
        assert c.sh("python3 -c 'import sys; print(sys.version_info[:2])'").strip() == "(3, 13)"
        _wait("active", lambda: c.sh("systemctl is-active edged", check=False).strip() == "active")
        assert _show(c, "StatusText").startswith("ready: ")
        wait_port(port)
        run(_publish(port, 3))
        c.run(["systemctl", "reload", "edged"])
        assert run(_stored(port)) == [b"m0", b"m1", b"m2"]
        c.run(["apt-get", "purge", "-y", "-q", "edged"])
        assert c.sh("test -e /var/lib/edged || echo gone").strip() == "gone"


@pytest.mark.parametrize(("arch", "machine", "suite", "python"),
                         [("arm64", "aarch64", "bookworm", "3.11"), ("armhf", "armv7l", "bookworm", "3.11"),
                          ("armhf", "armv7l", "trixie", "3.13")])
def test_foreign_package_runs_under_qemu_user(debs: dict[str, Path], tmp_path: Path, arch: str, machine: str,
                                              suite: str, python: str) -> None:
    """arm64: msgspec from PyPI's aarch64 wheel; armhf: msgspec cross-compiled by the build, for bookworm's
    CPython 3.11 and trixie's 3.13 (one package, the launcher picks the running Python's build)."""
    if missing_tools(arch_tools=True):
        pytest.fail(f"missing tools {missing_tools(arch_tools=True)}: run `make test-deb`")
    ensure_binfmt(arch)
    root = ensure_root(arch, suite)
    port = free_port()
    # msgspec must come from the vendored build for this Python (not, say, one left on the path)
    probe = ("python3 -I -c 'import sys; print(\"python\", \"%d.%d\" % sys.version_info[:2]); "
             "sys.path[0:0] = [\"/usr/lib/edged/vendor/cp%d%d\" % sys.version_info[:2]]; "
             "import msgspec._core as c; print(\"msgspec\", c.__file__)'")
    script = (f"apt-get install -y -q /dist/{debs[arch].name} >/dev/null && uname -m && edged --version && "
              f"{probe} && "
              f"exec runuser -u edged -- /usr/bin/edged run -c /etc/edged/edged.conf -a 127.0.0.1 -p {port} -m 0")
    log = str(tmp_path / f"{arch}.log")
    p = run_in_root(root, {str(debs[arch].parent): "/dist"}, script, log)
    try:
        wait_port(port, p, timeout=600)  # apt and Python under qemu: slow
        run(_publish(port, 3))
        assert run(_stored(port)) == [b"m0", b"m1", b"m2"]
        text = Path(log).read_text(errors="replace")
        assert re.search(f"^{machine}$", text, re.M), text[-2000:]
        assert f"edged {VERSION} " in text
        assert f"python {python}\n" in text, text[-2000:]
        pyd = python.replace(".", "")
        assert re.search(f"^msgspec /usr/lib/edged/vendor/cp{pyd}/msgspec/_core.cpython-{pyd}-", text, re.M), text[-2000:]
    finally:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

