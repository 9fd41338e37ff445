"""Fleet provisioning end to end (issue 21 §3): the operator mints device creds and bundles with `edged fleet`,
a real nats-server hub in operator mode (MEMORY resolver) takes them, and an edged subprocess is provisioned
with `edged provision`, rotates its creds (by provisioning, by a changed file, by SIGHUP) and goes back to the
creds the hub accepted when a new file is refused. Everything is the real thing: the CLI as a subprocess,
edged as a subprocess, nats-py clients on both sides."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import nkeys
import pytest

from edged.appliance import bundle as bundlemod
from edged.appliance import fleet
from edged.security.creds import format_creds
from edged.security.jwt import encode, new_keypair
from tests.support.aio import eventually, run
from tests.support.leaf import Hub
from tests.support.servers import ROOT, ServerProcess, free_port


def edged_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "edged", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


class Fleet:
    """An operator, a system account and a FLEET account whose signing key the `edged fleet` CLI made."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.op = new_keypair(nkeys.PREFIX_BYTE_OPERATOR)
        self.sys = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        self.acc = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
        for name, kp in (("op.nk", self.op), ("acc.nk", self.acc)):
            (workdir / name).write_text(bytes(kp.seed).decode() + "\n")
        r = edged_cli("fleet", "signing-key", "-o", str(workdir / "signing.nk"))
        assert r.returncode == 0, r.stderr
        self.signing_pub = r.stdout.strip()
        assert oct((workdir / "signing.nk").stat().st_mode & 0o777) == "0o600"
        r = edged_cli("fleet", "account", "--operator-seed", str(workdir / "op.nk"), "--account-seed",
                      str(workdir / "acc.nk"), "--signing-key", self.signing_pub, "--name", "FLEET",
                      "-o", str(workdir / "acc.jwt"))
        assert r.returncode == 0, r.stderr
        self.acc_jwt = (workdir / "acc.jwt").read_text().strip()
        self.op_jwt = encode({"sub": self.op.public_key.decode(), "name": "OP",
                              "nats": {"type": "operator", "system_account": self.sys.public_key.decode()}}, self.op)
        self.sys_jwt = encode({"sub": self.sys.public_key.decode(), "name": "SYS",
                               "nats": {"type": "account", "limits": {"conn": -1, "leaf": -1}}}, self.op)

    @property
    def acc_pub(self) -> str:
        return self.acc.public_key.decode()

    def hub_config(self) -> str:
        return (f"server_name: hub1\nleafnodes {{ port: $LEAF_PORT }}\noperator: {self.op_jwt}\n"
                f"system_account: {self.sys.public_key.decode()}\nresolver: MEMORY\n"
                f"resolver_preload: {{\n  {self.sys.public_key.decode()}: {self.sys_jwt}\n"
                f"  {self.acc_pub}: {self.acc_jwt}\n}}\n")

    def device_bundle(self, hub: Hub, device: str, out: str, *extra: str, signing_key: str = "") -> str:
        r = edged_cli("fleet", "device", device, "--signing-key", signing_key or str(self.dir / "signing.nk"),
                      "--account", self.acc_pub, "--hub", f"nats-leaf://127.0.0.1:{hub.leaf_port}", "-o", out, *extra)
        assert r.returncode == 0, r.stderr
        return out

    def app_creds(self) -> str:
        """A hub-side client user of the FLEET account that may use every subject."""
        sk = fleet.read_seed(str(self.dir / "signing.nk"), "SA")
        jwt, seed = fleet.mint_user(sk, self.acc_pub, "app", {"pub": {}, "sub": {}}, 3600)
        path = self.dir / "app.creds"
        path.write_text(format_creds(jwt, seed))
        return str(path)

    def rogue_key(self) -> str:
        """A signing key the account JWT does not list: the hub refuses the users it signs."""
        path = self.dir / "rogue.nk"
        r = edged_cli("fleet", "signing-key", "-o", str(path))
        assert r.returncode == 0, r.stderr
        return str(path)


@pytest.fixture
def setup(hub_bin: str, start_hub: Callable[..., Hub], tmp_path: Path) -> tuple[Fleet, Hub]:
    f = Fleet(tmp_path)
    return f, start_hub(hub_bin, f.hub_config())


def start_edge(start_server: Callable[..., ServerProcess], conf_dir: Path, domain: str = "dev1",
               extra: str = "") -> tuple[ServerProcess, int]:
    """An edged subprocess with a JetStream domain, a monitoring port and a pid file, not yet provisioned."""
    http = free_port()
    conf = conf_dir / "edged.conf"
    # a config already provisioned keeps its include of the bundle's fragment
    head = conf.read_text().splitlines(keepends=True)[0] if conf.exists() else ""
    head = head if head.startswith("include") else ""
    conf.write_text(head + f"server_name: {domain}\nhttp_port: {http}\npid_file: {conf_dir / 'edged.pid'}\n"
                    f"jetstream {{ store_dir: {json.dumps(str(conf_dir / 'store'))}, domain: {domain} }}\n"
                    f"edged {{ creds {{ watch_interval: 200ms }} }}\n{extra}")
    srv = start_server("edged", ["-c", str(conf)], workdir=str(conf_dir))
    return srv, http


def provision(conf_dir: Path, bundle: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return edged_cli("provision", bundle, "-c", str(conf_dir / "edged.conf"), "--timeout", "15", *extra)


def varz_remote(http: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=3) as r:
        remotes = json.loads(r.read())["leaf"]["remotes"]
    assert len(remotes) == 1, remotes
    return remotes[0]


def healthz(http: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=3) as r:
        return json.loads(r.read())


def user_of(bundle: str) -> str:
    return bundlemod.read(bundle).user_key


async def both_ways(f: Fleet, hub: Hub, edge: ServerProcess, device: str = "dev1", domain: str = "dev1") -> None:
    """A message each way on the device's own subjects, and a hub client's request to the edge's JetStream
    domain API (what the device user's permissions are scoped to)."""
    hc = await nats.connect(f"nats://127.0.0.1:{hub.port}", user_credentials=f.app_creds())
    ec = await nats.connect(edge.url)
    try:
        down = await ec.subscribe(f"devices.{device}.cmd")
        up = await hc.subscribe(f"devices.{device}.telemetry")
        await ec.flush()
        await hc.flush()

        async def cmd_arrives() -> bool:
            await hc.publish(f"devices.{device}.cmd", b"reboot")
            try:
                return (await down.next_msg(timeout=0.3)).data == b"reboot"
            except TimeoutError:
                return False

        await eventually(cmd_arrives, 10, "hub -> edge on the device's subject")

        async def telemetry_arrives() -> bool:
            await ec.publish(f"devices.{device}.telemetry", b"21.5C")
            try:
                return (await up.next_msg(timeout=0.3)).data == b"21.5C"
            except TimeoutError:
                return False

        await eventually(telemetry_arrives, 10, "edge -> hub on the device's subject")
        info = await hc.request(f"$JS.{domain}.API.INFO", b"", timeout=3)
        assert json.loads(info.data)["type"] == "io.nats.jetstream.api.v1.account_info_response"
    finally:
        await hc.close()
        await ec.close()


def test_minted_bundle_provisions_a_running_edged_and_messages_flow(
        setup: tuple[Fleet, Hub], start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    f, hub = setup
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    edge, http = start_edge(start_server, conf_dir)
    bundle = f.device_bundle(hub, "dev1", str(tmp_path / "dev1.tar.gz"))
    r = provision(conf_dir, bundle)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "hub accepted device dev1" in r.stdout and "leaf link is up" in r.stdout
    creds = conf_dir / "creds" / "device.creds"
    assert creds.stat().st_mode & 0o777 == 0o600
    assert (conf_dir / "creds").stat().st_mode & 0o777 == 0o700
    assert (conf_dir / "edged.conf").read_text().startswith('include "provisioned.conf"')
    rem = varz_remote(http)
    assert rem["connected"] and rem["creds"]["user"] == user_of(bundle)
    run(both_ways(f, hub, edge))
    # provisioning again (a rotation) with a new user: applied without a restart
    pid = edge.proc.pid
    bundle2 = f.device_bundle(hub, "dev1", str(tmp_path / "dev1-b"))
    r = provision(conf_dir, bundle2)
    assert r.returncode == 0, r.stderr + r.stdout
    rem = varz_remote(http)
    assert rem["connected"] and rem["creds"]["user"] == user_of(bundle2) != user_of(bundle)
    assert edge.proc.pid == pid and edge.proc.poll() is None
    # the previous creds are kept beside the new ones
    assert (conf_dir / "creds" / "device.creds.prev").read_text() == bundlemod.read(bundle).creds_text
    run(both_ways(f, hub, edge))


def test_a_bundle_the_hub_refuses_keeps_the_old_one(
        setup: tuple[Fleet, Hub], start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    f, hub = setup
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    edge, http = start_edge(start_server, conf_dir)
    good = f.device_bundle(hub, "dev1", str(tmp_path / "good"))
    assert provision(conf_dir, good).returncode == 0
    creds = conf_dir / "creds" / "device.creds"
    before = creds.read_text()
    bad = f.device_bundle(hub, "dev1", str(tmp_path / "bad"), signing_key=f.rogue_key())
    # the probe finds out before anything is installed
    r = provision(conf_dir, bad)
    assert r.returncode == 1
    assert "hub did not accept the bundle" in r.stderr and "uthorization" in r.stderr, r.stderr
    assert creds.read_text() == before
    assert sorted(p.name for p in creds.parent.iterdir()) == ["device.creds"]  # no probe leftovers
    # without the probe, the daemon tries the new creds, the hub refuses them, the daemon goes back to the
    # old ones and provision puts the old files back
    r = provision(conf_dir, bad, "--no-probe")
    assert r.returncode == 1, r.stdout
    assert "old bundle restored" in r.stderr and "refused" in r.stderr, r.stderr
    assert creds.read_text() == before
    rem = varz_remote(http)
    assert rem["creds"]["user"] == user_of(good)
    run(both_ways(f, hub, edge))


def test_creds_file_rotation_by_file_change_and_rollback(
        setup: tuple[Fleet, Hub], start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    f, hub = setup
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    edge, http = start_edge(start_server, conf_dir)
    first = f.device_bundle(hub, "dev1", str(tmp_path / "first"))
    assert provision(conf_dir, first).returncode == 0
    creds = conf_dir / "creds" / "device.creds"

    async def connected_as(user: str) -> bool:
        rem = varz_remote(http)
        return bool(rem["connected"] and rem["creds"]["user"] == user)

    # a new creds file written in place (no signal): used at a forced redial within seconds
    second = f.device_bundle(hub, "dev1", str(tmp_path / "second"))
    creds.write_text(Path(second, "device.creds").read_text())
    run(eventually(lambda: connected_as(user_of(second)), 10, "the link redials with the changed file"))
    assert varz_remote(http)["creds"]["rotations"] == 1
    # a file the hub refuses: edged goes back to the creds the hub accepted and says so
    bad = f.device_bundle(hub, "dev1", str(tmp_path / "bad"), signing_key=f.rogue_key())
    creds.write_text(Path(bad, "device.creds").read_text())

    async def rolled_back() -> bool:
        c = varz_remote(http)["creds"]
        return c["rollbacks"] == 1 and bool(await connected_as(user_of(second)))

    run(eventually(rolled_back, 15, "back on the accepted creds"))
    problem = varz_remote(http)["creds"]["problem"]
    assert "refused" in problem and user_of(bad) in problem
    h = healthz(http)
    assert h["status"] == "ok" and any("refused" in w for w in h["warnings"])
    run(both_ways(f, hub, edge))
    # SIGHUP re-reads the file at once: a good file again is taken
    third = f.device_bundle(hub, "dev1", str(tmp_path / "third"))
    creds.write_text(Path(third, "device.creds").read_text())
    r = edged_cli("--signal", f"reload={conf_dir / 'edged.pid'}")
    assert r.returncode == 0, r.stderr
    run(eventually(lambda: connected_as(user_of(third)), 10, "the link redials after SIGHUP"))
    assert "warnings" not in healthz(http)


def test_expiry_within_the_warning_window_shows_in_status_and_healthz(
        setup: tuple[Fleet, Hub], start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    f, hub = setup
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    _, http = start_edge(start_server, conf_dir)
    bundle = f.device_bundle(hub, "dev1", str(tmp_path / "short"), "--expires", "2d")
    assert provision(conf_dir, bundle, "--owner", "nobody").returncode == 0
    if os.geteuid() == 0:  # the package's layout: the creds belong to the service user, edged itself reads them
        nobody = pwd.getpwnam("nobody")
        for p in (conf_dir / "creds", conf_dir / "creds" / "device.creds"):
            assert (p.stat().st_uid, p.stat().st_gid) == (nobody.pw_uid, nobody.pw_gid)
    h = healthz(http)
    assert h["status"] == "ok" and any("expire in" in w for w in h["warnings"]), h
    r = edged_cli("status", "-m", str(http), "--json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)["leaf_remotes"][0]["creds"]
    assert c["expiring"] and 1.9 * 86400 < c["expires_in_seconds"] <= 2 * 86400
    r = edged_cli("status", "-m", str(http))
    assert "EXPIRING SOON" in r.stdout, r.stdout


def test_provision_refuses_a_damaged_bundle_and_touches_nothing(tmp_path: Path) -> None:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    (conf_dir / "edged.conf").write_text("port: 4222\n")
    bad = tmp_path / "bundle"
    bad.mkdir()
    (bad / "manifest.json").write_text('{"device": "x", "hub_urls": ["nats-leaf://h:7422"], "creds": "d.creds"}')
    (bad / "d.creds").write_text("not creds")
    r = provision(conf_dir, str(bad))
    assert r.returncode == 1 and "bundle refused" in r.stderr and "d.creds" in r.stderr, r.stderr
    assert (conf_dir / "edged.conf").read_text() == "port: 4222\n"
    assert not (conf_dir / "provisioned.conf").exists()
    r = provision(conf_dir, str(tmp_path / "missing.tar.gz"))
    assert r.returncode == 1 and "no such file" in r.stderr


def test_the_device_user_is_scoped_to_its_own_subjects(
        setup: tuple[Fleet, Hub], start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """What the hub lets the device's link carry: its own subjects, not another device's, and the link stays
    up (edged as the leaf keeps to the permissions the hub sent, so the hub never has to close it)."""
    f, hub = setup
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    edge, http = start_edge(start_server, conf_dir)
    assert provision(conf_dir, f.device_bundle(hub, "dev1", str(tmp_path / "b"))).returncode == 0

    async def main() -> None:
        hc = await nats.connect(f"nats://127.0.0.1:{hub.port}", user_credentials=f.app_creds())
        ec = await nats.connect(edge.url)
        try:
            other_up = await hc.subscribe("devices.dev2.telemetry")
            other_down = await ec.subscribe("devices.dev2.cmd")
            own_up = await hc.subscribe("devices.dev1.>")
            await hc.flush()
            await ec.flush()

            async def own_arrives() -> bool:
                await ec.publish("devices.dev2.telemetry", b"not mine")
                await ec.publish("devices.dev1.telemetry", b"mine")
                try:
                    return (await own_up.next_msg(timeout=0.3)).data == b"mine"
                except TimeoutError:
                    return False

            await eventually(own_arrives, 10, "the device's own subject reaches the hub")
            await hc.publish("devices.dev2.cmd", b"not for dev1")
            await hc.flush()
            for sub in (other_up, other_down):
                with pytest.raises(TimeoutError):
                    await sub.next_msg(timeout=0.5)
        finally:
            await hc.close()
            await ec.close()

    run(main())
    rem = varz_remote(http)
    assert rem["connected"] and rem["creds"]["rotations"] == 0 and not rem.get("last_error")


def test_tls_hub_with_the_bundles_ca_before_edged_starts_then_another_hub(
        setup: tuple[Fleet, Hub], start_hub: Callable[..., Hub], hub_bin: str, pki: dict[str, str],
        start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """The bundle's CA is what the link trusts (a TLS hub); provisioning a stopped edged installs the bundle for
    its next start; provisioning the running edged to another hub replaces the remote without a restart."""
    f, _ = setup
    tls = f'tls {{ cert_file: "{pki["server_cert"]}", key_file: "{pki["server_key"]}" }}'
    hub = start_hub(hub_bin, f.hub_config().replace("leafnodes { port: $LEAF_PORT }",
                                                    f"leafnodes {{ port: $LEAF_PORT, {tls} }}"))
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    out = str(tmp_path / "tls-bundle")
    r = edged_cli("fleet", "device", "dev1", "--signing-key", str(f.dir / "signing.nk"), "--account", f.acc_pub,
                  "--hub", f"tls://127.0.0.1:{hub.leaf_port}", "--ca", pki["ca"], "-o", out)
    assert r.returncode == 0, r.stderr
    (conf_dir / "edged.conf").write_text("server_name: dev1\njetstream { store_dir: "
                                         f"{json.dumps(str(conf_dir / 'store'))}, domain: dev1 }}\n")
    r = provision(conf_dir, out, "--pid", str(conf_dir / "none.pid"), "--unit", "")
    assert r.returncode == 0, r.stderr
    assert "not running" in r.stdout
    assert (conf_dir / "creds" / "ca.pem").read_text() == Path(pki["ca"]).read_text()
    edge, http = start_edge(start_server, conf_dir, extra="")
    conf = (conf_dir / "edged.conf").read_text()
    assert conf.startswith('include "provisioned.conf"')

    async def up() -> bool:
        return bool(varz_remote(http)["connected"])

    run(eventually(up, 15, "the link with the installed bundle"))
    run(both_ways(f, hub, edge))
    # the same device moved to another hub (plain TCP): the remote is replaced, the process stays
    other = start_hub(hub_bin, f.hub_config())
    pid = edge.proc.pid
    r = provision(conf_dir, f.device_bundle(other, "dev1", str(tmp_path / "moved")))
    assert r.returncode == 0, r.stderr
    rem = varz_remote(http)
    assert rem["connected"] and rem["urls"] == [f"127.0.0.1:{other.leaf_port}"]
    assert edge.proc.pid == pid
    run(both_ways(f, other, edge))


@pytest.mark.parametrize("leaf_kind", ["nats-server", "edged"])
def test_minted_creds_serve_a_nats_server_leaf_as_they_serve_edged(
        setup: tuple[Fleet, Hub], start_server: Callable[..., ServerProcess], tmp_path: Path, leaf_kind: str) -> None:
    """Differential: the same minted bundle's creds in a plain `leafnodes { remotes }` config, with nats-server
    and with edged as the leaf: both link to the hub, and the device's subjects and its domain's API work the
    same way through the scoped user."""
    f, hub = setup
    out = f.device_bundle(hub, "dev1", str(tmp_path / "b"))
    creds = Path(out, "device.creds")
    conf = (f"server_name: dev1\njetstream {{ store_dir: {json.dumps(str(tmp_path / 'js'))}, domain: dev1 }}\n"
            f"leafnodes {{ reconnect: 1s, remotes: [ {{ url: \"nats-leaf://127.0.0.1:{hub.leaf_port}\", "
            f"credentials: {json.dumps(str(creds))} }} ] }}\n")
    leaf = start_server(leaf_kind, [], config=conf)
    run(both_ways(f, hub, leaf))


def test_the_package_layout_first_provisioning_and_a_domain_move_without_a_restart(
        setup: tuple[Fleet, Hub], start_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """A config laid out for provisioning (it includes provisioned.conf and takes its JetStream domain from
    `$EDGED_DOMAIN`, empty until provisioned): provision leaves the main config as it is and the bundle's domain
    is live at once; moved to another domain by a second bundle, again without a restart: the hub reaches the
    edge's JetStream through the new domain only, and the stream stored before keeps its messages."""
    f, hub = setup
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    (conf_dir / "provisioned.conf").write_text('EDGED_DOMAIN: ""\n')
    http = free_port()
    main = (f'include "provisioned.conf"\nserver_name: dev1\nhttp_port: {http}\npid_file: {conf_dir / "edged.pid"}\n'
            f"jetstream {{ store_dir: {json.dumps(str(conf_dir / 'store'))}, domain: $EDGED_DOMAIN }}\n")
    (conf_dir / "edged.conf").write_text(main)
    edge = start_server("edged", ["-c", str(conf_dir / "edged.conf")], workdir=str(conf_dir))
    pid = edge.proc.pid

    async def fill() -> None:
        nc = await nats.connect(edge.url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="TELEMETRY", subjects=["tele.>"])
            for i in range(5):
                await js.publish(f"tele.{i}", b"m%d" % i)
        finally:
            await nc.close()

    run(fill())
    r = provision(conf_dir, f.device_bundle(hub, "dev1", str(tmp_path / "b")))
    assert r.returncode == 0, r.stderr + r.stdout
    assert "restart" not in r.stdout and "JetStream domain 'dev1'" in r.stdout, r.stdout
    assert (conf_dir / "edged.conf").read_text() == main  # the main config (a conffile) is not edited
    assert 'EDGED_DOMAIN: "dev1"' in (conf_dir / "provisioned.conf").read_text()
    assert varz_remote(http)["js_domain"] == "dev1"
    run(both_ways(f, hub, edge, domain="dev1"))
    run(hub_sees_stream(f, hub, "dev1", gone="", messages=5))
    # moved to another domain: a new bundle, again applied to the running process
    r = provision(conf_dir, f.device_bundle(hub, "dev1", str(tmp_path / "b2"), "--domain", "site7"))
    assert r.returncode == 0, r.stderr + r.stdout
    assert "restart" not in r.stdout and "JetStream domain 'site7'" in r.stdout, r.stdout
    rem = varz_remote(http)
    assert rem["connected"] and rem["js_domain"] == "site7"
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/jsz", timeout=3) as resp:
        assert json.loads(resp.read())["config"]["domain"] == "site7"
    run(both_ways(f, hub, edge, domain="site7"))
    run(hub_sees_stream(f, hub, "site7", gone="dev1", messages=5))
    assert edge.proc.pid == pid and edge.proc.poll() is None


async def hub_sees_stream(f: Fleet, hub: Hub, domain: str, gone: str, messages: int) -> None:
    """A hub client reads the edge's stream through `$JS.<domain>.API` (nats-py's domain option); the domain
    the edge left (`gone`) has nobody answering any more."""
    hc = await nats.connect(f"nats://127.0.0.1:{hub.port}", user_credentials=f.app_creds())
    try:
        js = hc.jetstream(domain=domain)

        async def reachable() -> bool:
            try:
                return (await js.stream_info("TELEMETRY")).state.messages == messages
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                return False

        await eventually(reachable, 10, f"the edge's stream through domain {domain!r}")
        msg = await js.get_msg("TELEMETRY", 1)
        assert msg.data == b"m0"
        if gone:
            with pytest.raises(nats.errors.NoRespondersError):
                await hc.request(f"$JS.{gone}.API.STREAM.INFO.TELEMETRY", b"", timeout=3)
    finally:
        await hc.close()
