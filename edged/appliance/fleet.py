"""`edged fleet`: the operator's side of provisioning, with the nkeys library.

The operator keeps the account's identity key offline and gives the fleet tooling an account *signing
key*: device users are signed by it (`issuer_account` names the account), so a leaked signing key is
replaced by re-issuing the account JWT without it, and the account key never leaves the vault.

A device's user is scoped to what a leafnode of that device needs; the hub enforces the user's
permissions on the link (`pub` = what the leaf may send, `sub` = what it may receive):
- its own subjects (`devices.<device>.>` unless told otherwise), both ways;
- its domain's JetStream API (`$JS.<domain>.API.>`), received: the hub and its clients manage and read
  the edge's streams through it; the replies go to `_INBOX.>`;
- JetStream's flow subjects: acks (`$JS.ACK.>`), flow control (`$JS.FC.>`), mirror/source deliveries
  (`$JS.M.>`, `$JS.S.>`) both ways, so the hub can source the edge's streams and the edge can mirror
  the hub's;
- with a hub domain, the hub's JetStream API (`$JS.<hub_domain>.API.>`), sent: the edge's mirrors
  create their consumers on the hub through it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

import nkeys

from edged.appliance import bundle as bundlemod
from edged.security.jwt import JWTError, encode, new_keypair, verify, verify_public_key

DEFAULT_VALIDITY = "365d"
_VALIDITY = re.compile(r"^(\d+)([wdhms])$")
_UNIT = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
JS_FLOW = ["$JS.ACK.>", "$JS.FC.>", "$JS.M.>", "$JS.S.>"]


class FleetError(ValueError):
    """An operator-side step that cannot be done; the message is the one line shown."""


def parse_validity(text: str) -> int:
    """Seconds from `90d`, `2w`, `12h`, `30m`, `45s`; `0` means the JWT never expires."""
    t = text.strip().lower()
    if t in ("0", "never"):
        return 0
    m = _VALIDITY.match(t)
    if not m or int(m.group(1)) <= 0:
        raise FleetError(f"expiry {text!r}: expected a count and a unit (w, d, h, m, s), e.g. 90d, or 0 for never")
    return int(m.group(1)) * _UNIT[m.group(2)]


def device_permissions(device: str, domain: str = "", subjects: list[str] | None = None, hub_domain: str = "",
                       extra_pub: list[str] | None = None, extra_sub: list[str] | None = None) -> dict[str, Any]:
    """The `pub`/`sub` of a device's leafnode user (see the module docstring for why each is there)."""
    own = list(subjects) if subjects else [f"devices.{device}.>"]
    pub = own + ["_INBOX.>"] + JS_FLOW
    sub = own + ["_INBOX.>"] + JS_FLOW
    if domain:
        sub.append(f"$JS.{domain}.API.>")
    if hub_domain:
        pub.append(f"$JS.{hub_domain}.API.>")
    pub += extra_pub or []
    sub += extra_sub or []
    return {"pub": {"allow": _unique(pub)}, "sub": {"allow": _unique(sub)}}


def _unique(xs: list[str]) -> list[str]:
    return list(dict.fromkeys(xs))


def user_claims(user_pub: str, account_pub: str, name: str, perms: dict[str, Any], expires: int,
                now: int) -> dict[str, Any]:
    """A v2 user JWT's claims: signed by a signing key, so `issuer_account` names the account."""
    nats_: dict[str, Any] = {"type": "user", "version": 2, "issuer_account": account_pub, "subs": -1, "data": -1,
                             "payload": -1, **perms}
    c: dict[str, Any] = {"sub": user_pub, "name": name, "iat": now, "nats": nats_}
    if expires:
        c["exp"] = expires
    return c


def mint_user(signing_key: Any, account_pub: str, name: str, perms: dict[str, Any], validity_s: int,
              now: int | None = None) -> tuple[str, bytes]:
    """(user JWT, user seed) for a new user nkey, signed by the account signing key `signing_key`."""
    try:
        verify_public_key(account_pub, "A")
    except JWTError as e:
        raise FleetError(f"account: {e}") from None
    now = int(time.time()) if now is None else now
    user = new_keypair(nkeys.PREFIX_BYTE_USER)
    claims = user_claims(user.public_key.decode(), account_pub, name, perms, now + validity_s if validity_s else 0, now)
    return encode(claims, signing_key, iat=now), bytes(user.seed)


def account_claims(account_pub: str, name: str, signing_keys: list[str], limits: dict[str, Any] | None = None,
                   jetstream: bool = True) -> dict[str, Any]:
    """An account JWT's claims listing the fleet's signing keys (signed by the operator)."""
    lim: dict[str, Any] = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
                           "conn": -1, "leaf": -1}
    if jetstream:
        lim |= {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    lim |= limits or {}
    return {"sub": account_pub, "name": name,
            "nats": {"type": "account", "version": 2, "limits": lim, "signing_keys": list(signing_keys)}}


def read_seed(path: str, prefix: str) -> Any:
    """An nkeys KeyPair from a seed file (the first line that is a seed), of the role `prefix` (e.g. "SA")."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise FleetError(f"cannot read seed file {path!r}: {e.strerror}") from None
    for line in text.split():
        if line.startswith("S") and len(line) == 58:
            if not line.startswith(prefix):
                raise FleetError(f"{path}: the seed is a {line[:2]} seed, expected {prefix}")
            try:
                return nkeys.from_seed(bytearray(line.encode()))
            except Exception as e:  # nkeys' own error kinds for a damaged seed
                raise FleetError(f"{path}: not a valid nkey seed: {e or type(e).__name__}") from None
    raise FleetError(f"{path}: no nkey seed in the file")


def write_secret(path: str, text: str) -> None:
    """Write a file only its owner can read, atomically (temp file, fsync, rename)."""
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ------------------------------------------------------------------------------------ the command

USAGE = "edged fleet {signing-key,account,device} ..."
DESCRIPTION = (
    "The operator's side of provisioning (keys stay on the operator's machine):\n\n"
    "  signing-key  create an account signing key (seed file, 0600) and print its public key\n"
    "  account      write the account JWT listing the signing keys, signed by the operator\n"
    "  device       mint a device's user JWT and .creds, signed by the signing key, and write its bundle")


def parser(usage: str, description: str, formatter: type[argparse.HelpFormatter],
           parser_class: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = parser_class(prog="edged fleet", add_help=False, allow_abbrev=False, formatter_class=formatter,
                     usage=usage, description=description)
    p.add_argument("-h", "--help", action="help", help="show this help and exit")
    sub = p.add_subparsers(dest="fleet_command", metavar="{signing-key,account,device}", parser_class=parser_class,
                         prog="edged fleet")
    sk = sub.add_parser("signing-key", help="create an account signing key", add_help=True)
    sk.add_argument("-o", "--out", required=True, help="seed file to write (0600)")
    ac = sub.add_parser("account", help="write the account JWT with its signing keys", add_help=True)
    ac.add_argument("--operator-seed", required=True, help="operator seed file (SO...)")
    ac.add_argument("--account-seed", required=True, help="account identity seed file (SA...)")
    ac.add_argument("--signing-key", action="append", default=[], help="a signing key's public key or seed file")
    ac.add_argument("--name", default="FLEET", help="account name")
    ac.add_argument("-o", "--out", required=True, help="account JWT file to write")
    dv = sub.add_parser("device", help="mint a device user and write its bundle", add_help=True)
    dv.add_argument("device", help="device name (letters, digits, . _ -)")
    dv.add_argument("--signing-key", required=True, help="account signing key seed file (SA...)")
    dv.add_argument("--account", required=True, help="the account's public key (A...)")
    dv.add_argument("--hub", action="append", required=True, help="hub leafnode URL (repeat for several)")
    dv.add_argument("--domain", help="the device's JetStream domain (default: the device name; '' for none)")
    dv.add_argument("--hub-domain", default="", help="the hub's JetStream domain (lets the edge mirror hub streams)")
    dv.add_argument("--subject", action="append", default=[], help="the device's own subjects "
                    "(default devices.<device>.>; repeat for several)")
    dv.add_argument("--allow-pub", action="append", default=[], help="an extra subject the device may send")
    dv.add_argument("--allow-sub", action="append", default=[], help="an extra subject the device may receive")
    dv.add_argument("--expires", default=DEFAULT_VALIDITY, help=f"validity (default {DEFAULT_VALIDITY}; 0 = never)")
    dv.add_argument("--ca", help="the hub's CA certificate (PEM) to put in the bundle")
    dv.add_argument("--local-account", default="", help="the edge's local account the link binds (default $G)")
    dv.add_argument("-o", "--out", required=True, help="bundle to write: a directory, or a .tar.gz")
    return p


def _signing_key(args: argparse.Namespace) -> int:
    kp = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    write_secret(args.out, bytes(kp.seed).decode() + "\n")
    print(kp.public_key.decode())
    return 0


def _account(args: argparse.Namespace) -> int:
    op = read_seed(args.operator_seed, "SO")
    acc = read_seed(args.account_seed, "SA")
    keys = []
    for k in args.signing_key:
        if os.path.exists(k):
            keys.append(read_seed(k, "SA").public_key.decode())
        else:
            verify_public_key(k, "A")
            keys.append(k)
    token = encode(account_claims(acc.public_key.decode(), args.name, keys), op)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    print(acc.public_key.decode())
    return 0


def _device(args: argparse.Namespace) -> int:
    sk = read_seed(args.signing_key, "SA")
    domain = args.device if args.domain is None else args.domain
    perms = device_permissions(args.device, domain, args.subject, args.hub_domain, args.allow_pub, args.allow_sub)
    jwt, seed = mint_user(sk, args.account, args.device, perms, parse_validity(args.expires))
    ca = ""
    if args.ca:
        try:
            with open(args.ca, encoding="ascii") as f:
                ca = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise FleetError(f"cannot read CA certificate {args.ca!r}: {e}") from None
    b = bundlemod.make(args.device, args.hub, jwt, seed, domain=domain, ca_pem=ca, account=args.local_account,
                       hub_domain=args.hub_domain)
    bundlemod.from_files(b.files())  # what provision will check, checked before anything is written
    bundlemod.write(b, args.out)
    claims = verify(jwt)
    exp = claims.get("exp")
    print(f"device {args.device}: user {claims['sub']}, "
          f"expires {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(exp)) if exp else 'never'}, "
          f"bundle {args.out}")
    return 0


def run(args: argparse.Namespace) -> int:
    handlers = {"signing-key": _signing_key, "account": _account, "device": _device}
    fn = handlers.get(args.fleet_command or "")
    if fn is None:
        print(f"edged fleet: a command is required: {', '.join(handlers)} (see edged fleet -h)", file=sys.stderr)
        return 1
    try:
        return fn(args)
    except (FleetError, bundlemod.BundleError, JWTError) as e:
        print(f"edged fleet: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"edged fleet: {e.filename or ''}: {e.strerror}", file=sys.stderr)
        return 1

