"""`edged provision BUNDLE`: install a provisioning bundle on the device and bring the leaf link up with it.

The steps, each of which leaves the old bundle in place when it fails:
1. read and check the bundle (edged/appliance/bundle.py): manifest, creds (a user JWT for the seed beside it, not
   expired), CA certificate;
2. probe the hub: a short-lived in-process leafnode connection with the new creds, so creds the hub
   refuses never replace working ones;
3. install atomically: each file written to a temp file in its directory, fsynced, given its owner and
   mode (root: edged:edged, 0600 files in a 0700 creds directory), renamed over the old one (kept as
   `*.prev`); `provisioned.conf` (the leafnode remote, and the domain as `$EDGED_DOMAIN`) is included
   from the main config, and the result must load;
4. apply without a restart: SIGHUP to the running edged (its pid file), then, with a monitoring port,
   wait until /varz shows the remote connected as the new user and in the bundle's JetStream domain (a
   reload applies a new domain, edged/server.py); the daemon itself goes back to the old
   creds if the hub refuses the new ones, and provision then puts the old files back.
Exit status: 0 installed (and applied, when edged runs), 1 refused or failed (the old bundle stays).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from edged.appliance import bundle as bundlemod
from edged.appliance.bundle import Bundle, BundleError
from edged.settings.conf import ConfigError

DEFAULT_CONFIG = "/etc/edged/edged.conf"
FRAGMENT = "provisioned.conf"
CREDS_DIR = "creds"
CREDS_FILE = "device.creds"
CA_FILE = "ca.pem"
SERVICE_USER = "edged"
INCLUDE_LINE = f'include "{FRAGMENT}"  # written by edged provision: the hub link (and the domain variable)\n'


class ProvisionError(Exception):
    """A step failed; the message says which and why (the old bundle is in place)."""


@dataclass
class Layout:
    """Where a bundle goes, derived from the main config file's directory."""

    config: str
    config_dir: str = ""
    creds_dir: str = ""
    creds: str = ""
    ca: str = ""
    fragment: str = ""

    def __post_init__(self) -> None:
        self.config = os.path.abspath(self.config)
        self.config_dir = os.path.dirname(self.config)
        self.creds_dir = self.creds_dir or os.path.join(self.config_dir, CREDS_DIR)
        self.creds = os.path.join(self.creds_dir, CREDS_FILE)
        self.ca = os.path.join(self.creds_dir, CA_FILE)
        self.fragment = os.path.join(self.config_dir, FRAGMENT)


_ESC = {"\\": "\\\\", '"': '\\"', "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _q(s: str) -> str:
    """A double-quoted config string read back as written: the escapes nats-server's parser knows
    (backslash, quote, tab, newline, return, and hex for other control bytes); the rest as it is (UTF-8)."""
    return '"' + "".join(_ESC.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x20 else c) for c in s) + '"'


def fragment_text(b: Bundle, lay: Layout, domain_var: bool = True) -> str:
    """The config fragment: the leafnode remote to the hub with the device's creds, and the domain as the
    variable `EDGED_DOMAIN` when the main config uses it (an unused variable is an unknown key)."""
    lines = ["# written by `edged provision` for device " + b.device + ": replaced at the next provisioning"]
    if domain_var:
        lines.append(f"EDGED_DOMAIN: {_q(b.domain)}")
    lines += ["leafnodes {", "  remotes: [", "    {",
              f"      urls: [{', '.join(_q(u) for u in b.hub_urls)}]", f"      credentials: {_q(lay.creds)}"]
    if b.account:
        lines.append(f"      account: {_q(b.account)}")
    for k, v in b.leafnode.items():
        if isinstance(v, bool):
            lines.append(f"      {k}: {'true' if v else 'false'}")
        else:
            lines.append(f"      {k}: [{', '.join(_q(x) for x in v)}]")
    if b.ca_pem:
        lines.append(f"      tls {{ ca_file: {_q(lay.ca)} }}")
    lines += ["    }", "  ]", "}", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ files


def _owner(user: str = SERVICE_USER) -> tuple[int, int] | None:
    """The service user and its group (edged:edged in the package's layout) when run as root and the
    user exists; else the files stay ours (a source install run by its own user)."""
    if os.geteuid() != 0 or not user:
        return None
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None
    return pw.pw_uid, pw.pw_gid


def _fsync_dir(d: str) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int, owner: tuple[int, int] | None) -> None:
    """Temp file in the same directory, fsync, owner and mode, rename over `path`, fsync the directory."""
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if owner is not None:
                os.fchown(f.fileno(), *owner)
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(d)


@dataclass
class Install:
    """The files one provisioning replaced, with their old contents, so it can be undone."""

    previous: dict[str, bytes | None] = field(default_factory=dict)
    modes: dict[str, tuple[int, tuple[int, int] | None]] = field(default_factory=dict)

    def put(self, path: str, data: bytes, mode: int, owner: tuple[int, int] | None) -> None:
        old: bytes | None = None
        try:
            with open(path, "rb") as f:
                old = f.read()
        except FileNotFoundError:
            pass
        if path not in self.previous:
            self.previous[path] = old
            self.modes[path] = (mode, owner)
        if old is not None and old != data:
            write_atomic(path + ".prev", old, mode, owner)
        write_atomic(path, data, mode, owner)

    def undo(self) -> None:
        for path, old in reversed(list(self.previous.items())):
            mode, owner = self.modes[path]
            if old is None:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            else:
                write_atomic(path, old, mode, owner)


def main_config(config: str) -> bytes:
    try:
        with open(config, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def uses_domain_var(text: bytes) -> bool:
    """Whether the main config reads `$EDGED_DOMAIN` (outside comments)."""
    for line in text.decode("utf-8", "replace").splitlines():
        code = line.split("#", 1)[0].split("//", 1)[0]
        if "$EDGED_DOMAIN" in code:
            return True
    return False


def ensure_include(config: str, inst: Install) -> None:
    """The main config includes the fragment first (so `$EDGED_DOMAIN` is defined where it is used)."""
    text = main_config(config)
    for line in text.decode("utf-8", "replace").splitlines():
        stripped = line.strip()
        if stripped.startswith("include") and FRAGMENT in stripped:
            return
    st = os.stat(config) if os.path.exists(config) else None
    owner = (st.st_uid, st.st_gid) if st is not None and os.geteuid() == 0 else None
    inst.put(config, INCLUDE_LINE.encode() + text, (st.st_mode & 0o7777) if st else 0o644, owner)


# ------------------------------------------------------------------------------------ the hub


async def _probe_async(b: Bundle, creds_path: str, ca_path: str, timeout: float) -> str:
    from edged.server import Server
    from edged.settings.options import LeafNodeOpts, Options, RemoteLeafOpts, TLSConfig

    remote = RemoteLeafOpts(urls=list(b.hub_urls), credentials=creds_path, account=b.account,
                            tls=TLSConfig(ca_file=ca_path) if ca_path else None, **b.leafnode)
    opts = Options(host="127.0.0.1", port=-1, server_name=f"{b.device}-provision-probe")
    opts.leafnodes = LeafNodeOpts(remotes=[remote], reconnect=0.5)
    srv = Server(opts)
    await srv.start()
    try:
        ok = await srv.leafnodes.wait_connected(timeout)
        return "" if ok else (srv.leafnodes.links[0].last_error or f"no link to the hub within {timeout:.0f}s")
    finally:
        await srv.shutdown()


def probe(b: Bundle, creds_path: str, ca_path: str, timeout: float) -> str:
    """"" when a leafnode link with the bundle's creds comes up, else why not."""
    logger = logging.getLogger("edged")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # the probe's own link log lines are not the command's output
    try:
        return asyncio.run(_probe_async(b, creds_path, ca_path, timeout))
    finally:
        logger.setLevel(level)


# ------------------------------------------------------------------------------------ the daemon


def _read_pid(pid: str, pid_file: str, unit: str = "") -> int | None:
    """The running edged: a pid given, its pid file, or the systemd unit's MainPID (the package runs it
    without a pid file)."""
    if pid:
        return int(pid)
    if pid_file:
        try:
            with open(pid_file) as f:
                text = f.read().strip()
            return int(text) if text.isdigit() else None
        except OSError:
            pass
    if unit and shutil.which("systemctl"):
        try:
            r = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit], capture_output=True,
                               text=True, timeout=5, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = r.stdout.strip()
        return int(text) if r.returncode == 0 and text.isdigit() and text != "0" else None
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _varz(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=3) as r:  # noqa: S310
        return json.loads(r.read())


def _remote_state(varz: dict[str, Any], creds_path: str) -> dict[str, Any] | None:
    for r in (varz.get("leaf") or {}).get("remotes") or []:
        c = r.get("creds") or {}
        if c.get("file") == creds_path:
            return r
    return None


def wait_applied(port: int, creds_path: str, user: str, timeout: float, domain: str | None = None) -> str:
    """"" once the daemon's remote is connected as `user` (and, given a `domain`, advertises it to the hub);
    else what /varz says is wrong."""
    deadline = time.monotonic() + timeout
    last = "the daemon's /varz shows no leafnode remote with the new creds file"
    while time.monotonic() < deadline:
        try:
            r = _remote_state(_varz(port), creds_path)
        except (OSError, ValueError) as e:
            last = f"cannot read the daemon's monitoring port {port}: {e}"
            r = None
        if r is not None:
            c = r["creds"]
            on_domain = domain is None or r.get("js_domain", "") == domain
            if c.get("user") == user and r.get("connected") and not c.get("trying_new") and on_domain:
                return ""
            if c.get("problem") and c.get("user") != user:
                return c["problem"]
            last = (f"the remote is {'connected' if r.get('connected') else 'not connected'} as user {c.get('user')}"
                    + ("" if on_domain else f" with JetStream domain {r.get('js_domain', '')!r}")
                    + (f": {r.get('last_error')}" if r.get("last_error") else ""))
        time.sleep(0.2)
    return f"the link did not come up with the new creds within {timeout:.0f}s: {last}"


# ------------------------------------------------------------------------------------ the command

USAGE = "edged provision BUNDLE [-c CONFIG] [-P PIDFILE] [-m PORT] [--timeout S] [--no-probe]"
DESCRIPTION = (
    "Install a provisioning bundle (a directory or tar.gz with manifest.json, the device's .creds and the hub's CA, "
    "as written by `edged fleet device`) next to the config file, check it against the hub, and apply it to the "
    "running edged without a restart (SIGHUP). On any failure the old bundle stays in place and the reason is "
    "printed; exit status 1.")


def parser(usage: str, description: str, formatter: type[argparse.HelpFormatter],
           parser_class: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = parser_class(prog="edged provision", add_help=False, allow_abbrev=False, formatter_class=formatter,
                     usage=usage, description=description)
    p.add_argument("-h", "--help", action="help", help="show this help and exit")
    p.add_argument("bundle", help="the bundle: a directory or a .tar.gz")
    p.add_argument("-c", "--config", default=DEFAULT_CONFIG, help=f"edged's config file (default {DEFAULT_CONFIG})")
    p.add_argument("--creds-dir", default="", help="where the creds and CA go (default: creds/ beside the config)")
    p.add_argument("-P", "--pid", dest="pid_file", default="", help="the running edged's pid file "
                   "(default: the config's pid_file)")
    p.add_argument("--pid-number", default="", help="the running edged's pid (instead of a pid file)")
    p.add_argument("--unit", default="edged", help="the systemd unit whose MainPID is edged, when there is no pid "
                   "file (default edged)")
    p.add_argument("--owner", default=SERVICE_USER, help=f"when run as root, the user (and its group) owning the "
                   f"creds (default {SERVICE_USER}; skipped when there is no such user)")
    p.add_argument("-m", "--http_port", type=int, default=0, help="its monitoring port (default: the config's)")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for the link (default 20)")
    p.add_argument("--no-probe", action="store_true", help="skip the probe connection to the hub")
    return p


def provision(ns: argparse.Namespace, say: Any = print) -> None:
    """Raises ProvisionError (old bundle in place) or returns once the bundle is installed and applied."""
    from edged.security.jwt import JWTError, verify
    from edged.settings.config import load_options

    try:
        b = bundlemod.read(ns.bundle)
    except BundleError as e:
        raise ProvisionError(f"bundle refused: {e}") from None
    exp = b.expires
    if exp and exp <= time.time():
        raise ProvisionError(f"bundle refused: the device's user JWT expired at {time.ctime(exp)}")
    try:
        verify(b.user_jwt)  # its signature is its issuer's (the hub checks the chain)
    except JWTError as e:
        raise ProvisionError(f"bundle refused: the device's user JWT: {e}") from None
    lay = Layout(ns.config, creds_dir=ns.creds_dir)
    owner = _owner(ns.owner)
    if not ns.no_probe:
        with tempfile.TemporaryDirectory(prefix="edged-provision-") as tmp:  # 0700, ours, gone after the probe
            creds = os.path.join(tmp, CREDS_FILE)
            write_atomic(creds, b.creds_text.encode(), 0o600, None)
            ca = ""
            if b.ca_pem:
                ca = os.path.join(tmp, CA_FILE)
                write_atomic(ca, b.ca_pem.encode(), 0o600, None)
            why = probe(b, creds, ca, ns.timeout)
        if why:
            raise ProvisionError(f"the hub did not accept the bundle (old bundle kept): {why}")
        say(f"edged provision: hub accepted device {b.device} (user {b.user_key})")
    os.makedirs(lay.creds_dir, mode=0o700, exist_ok=True)
    os.chmod(lay.creds_dir, 0o700)
    if owner is not None:
        os.chown(lay.creds_dir, *owner)
    inst = Install()
    try:
        inst.put(lay.creds, b.creds_text.encode(), 0o600, owner)
        if b.ca_pem:
            inst.put(lay.ca, b.ca_pem.encode(), 0o600, owner)
        domain_var = uses_domain_var(main_config(lay.config))
        inst.put(lay.fragment, fragment_text(b, lay, domain_var).encode(), 0o644, None)
        ensure_include(lay.config, inst)
        try:
            opts = load_options(lay.config)
        except (ConfigError, ValueError, OSError) as e:
            raise ProvisionError(f"the config does not load with the bundle (old bundle restored): {e}") from None
        remotes = opts.leafnodes.remotes if opts.leafnodes is not None else []
        if not any(r.credentials == lay.creds for r in remotes):
            raise ProvisionError(f"{lay.config} defines its own leafnodes block after the include of {FRAGMENT}, "
                                 "so the bundle's remote would not be used (old bundle restored)")
        if opts.jetstream.enabled and opts.jetstream.domain != b.domain:
            raise ProvisionError(f"{lay.config}: the jetstream block's domain is {opts.jetstream.domain!r}, the "
                                 f"bundle's {b.domain!r}: write `domain: $EDGED_DOMAIN` in it (old bundle restored)")
        _apply(ns, b, lay, opts, say)
    except BaseException:
        inst.undo()
        raise
    say(f"edged provision: device {b.device} installed in {lay.config_dir}")


def _apply(ns: argparse.Namespace, b: Bundle, lay: Layout, opts: Any, say: Any) -> None:
    pid = _read_pid(ns.pid_number, ns.pid_file or opts.pid_file, ns.unit)
    if pid is None or not _alive(pid):
        say("edged provision: edged is not running (no live pid): the bundle is used when it starts")
        return
    port = ns.http_port or opts.http_port
    os.kill(pid, signal.SIGHUP)
    if not port:
        say("edged provision: edged reloaded (no monitoring port to watch the link: see its log)")
        return
    # a new JetStream domain is applied by the reload too: the link is only up once it advertises it
    why = wait_applied(port, lay.creds, b.user_key, ns.timeout, b.domain if opts.jetstream.enabled else None)
    if why:
        raise _Rollback(pid, f"the running edged did not take the bundle (old bundle restored): {why}")
    say(f"edged provision: edged's leaf link is up as {b.user_key}"
        + (f", JetStream domain {b.domain!r}" if opts.jetstream.enabled else ""))


class _Rollback(ProvisionError):
    """A failure after the daemon was told to reload: it is told again once the old files are back."""

    def __init__(self, pid: int, message: str) -> None:
        super().__init__(message)
        self.pid = pid


def run(ns: argparse.Namespace) -> int:
    try:
        provision(ns)
    except _Rollback as e:
        try:
            os.kill(e.pid, signal.SIGHUP)  # the files are back: the daemon re-reads them
        except OSError:
            pass
        print(f"edged provision: {e}", file=sys.stderr)
        return 1
    except ProvisionError as e:
        print(f"edged provision: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"edged provision: {e.filename or ''}: {e.strerror} (old bundle kept)", file=sys.stderr)
        return 1
    return 0
