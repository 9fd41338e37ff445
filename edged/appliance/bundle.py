"""Provisioning bundles: what `edged fleet device` writes and `edged provision` installs.

A bundle is a directory, or a tar.gz of one, holding `manifest.json` and the files it names:

    {"format": 1, "device": "pump-17", "domain": "pump-17",
     "hub_urls": ["tls://hub.example.com:7422"], "creds": "device.creds", "ca": "ca.pem",
     "account": "", "hub_domain": "hub", "leafnode": {"deny_imports": [], "deny_exports": []}}

`device`, `hub_urls` and `creds` are required; `domain` ("" = no JetStream domain), `ca` (the hub's
CA certificate, PEM), `account` (the local account the link binds, default `$G`), `hub_domain`
(informational) and `leafnode` (extra remote settings) are optional. Parsing is pure (bytes in, a
`Bundle` out) so it is unit tested on any input; reading a directory or archive is the thin part.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from dataclasses import dataclass, field
from typing import Any

import nkeys
from cryptography import x509

from edged.security.creds import CredsError, format_creds, parse_creds
from edged.security.jwt import JWTError, decode

FORMAT = 1
MANIFEST = "manifest.json"
MAX_FILE = 1 << 20  # a bundle's files are small; a bigger one is not a bundle
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_DOMAIN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_URL_SCHEMES = ("nats", "nats-leaf", "tls", "ws", "wss")
_LEAF_KEYS = {"deny_imports": list, "deny_exports": list, "no_randomize": bool, "ws_compression": bool,
              "ws_no_masking": bool}


class BundleError(ValueError):
    """A bundle that cannot be installed; the message says which part and why."""


@dataclass
class Bundle:
    device: str
    hub_urls: list[str]
    creds_text: str
    domain: str = ""
    ca_pem: str = ""
    account: str = ""
    hub_domain: str = ""
    leafnode: dict[str, Any] = field(default_factory=dict)

    @property
    def user_jwt(self) -> str:
        return parse_creds(self.creds_text)[0]

    def claims(self) -> dict[str, Any]:
        return decode(self.user_jwt)

    @property
    def user_key(self) -> str:
        return str(self.claims().get("sub", ""))

    @property
    def expires(self) -> int:
        """Unix time the device's user JWT expires, 0 for never."""
        return int(self.claims().get("exp") or 0)

    def manifest(self) -> dict[str, Any]:
        m: dict[str, Any] = {"format": FORMAT, "device": self.device, "domain": self.domain,
                             "hub_urls": list(self.hub_urls), "creds": "device.creds"}
        if self.ca_pem:
            m["ca"] = "ca.pem"
        if self.account:
            m["account"] = self.account
        if self.hub_domain:
            m["hub_domain"] = self.hub_domain
        if self.leafnode:
            m["leafnode"] = dict(self.leafnode)
        return m

    def files(self) -> dict[str, bytes]:
        out = {MANIFEST: json.dumps(self.manifest(), indent=2).encode() + b"\n",
               "device.creds": self.creds_text.encode()}
        if self.ca_pem:
            out["ca.pem"] = self.ca_pem.encode()
        return out


def _str(m: dict[str, Any], key: str, required: bool = False) -> str:
    v = m.get(key, "")
    if v is None:
        v = ""
    if not isinstance(v, str):
        raise BundleError(f"manifest: {key!r} must be a string, got {type(v).__name__}")
    if required and not v:
        raise BundleError(f"manifest: {key!r} is required")
    return v


def _check_url(u: Any) -> str:
    if not isinstance(u, str) or "://" not in u:
        raise BundleError(f"manifest: hub URL {u!r} is not a URL (scheme://host:port)")
    scheme = u.split("://", 1)[0].lower()
    if scheme not in _URL_SCHEMES:
        raise BundleError(f"manifest: hub URL {u!r}: scheme {scheme!r} is not one of {', '.join(_URL_SCHEMES)}")
    if not u.split("://", 1)[1].strip("/"):
        raise BundleError(f"manifest: hub URL {u!r} has no host")
    return u


def parse_manifest(data: bytes) -> dict[str, Any]:
    """The manifest's fields, checked; file references are returned as names, not read."""
    try:
        m = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BundleError(f"manifest.json is not JSON: {e}") from None
    if not isinstance(m, dict):
        raise BundleError("manifest.json must be a JSON object")
    fmt = m.get("format", FORMAT)
    if fmt != FORMAT:
        raise BundleError(f"manifest: format {fmt!r} is not supported (this edged reads format {FORMAT})")
    device = _str(m, "device", required=True)
    if not _NAME.match(device):
        raise BundleError(f"manifest: device name {device!r} must be 1-64 letters, digits, '.', '_' or '-'")
    domain = _str(m, "domain")
    if domain and not _DOMAIN.match(domain):
        raise BundleError(f"manifest: domain {domain!r} must be letters, digits, '_' or '-' (no dots or spaces)")
    urls = m.get("hub_urls")
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or not urls:
        raise BundleError("manifest: 'hub_urls' must be a non-empty list of URLs")
    leaf = m.get("leafnode") or {}
    if not isinstance(leaf, dict):
        raise BundleError("manifest: 'leafnode' must be an object")
    for k, v in leaf.items():
        want = _LEAF_KEYS.get(k)
        if want is None:
            raise BundleError(f"manifest: leafnode setting {k!r} is not supported (one of {', '.join(_LEAF_KEYS)})")
        if not isinstance(v, want) or (want is list and not all(isinstance(s, str) for s in v)):
            raise BundleError(f"manifest: leafnode {k!r} must be {'a list of subjects' if want is list else 'true/false'}")
    out = {"device": device, "domain": domain, "hub_urls": [_check_url(u) for u in urls],
           "creds": _str(m, "creds", required=True), "ca": _str(m, "ca"), "account": _str(m, "account"),
           "hub_domain": _str(m, "hub_domain"), "leafnode": leaf}
    for key in ("creds", "ca"):
        name = out[key]
        if name and (not _NAME.match(name) or name == MANIFEST):
            raise BundleError(f"manifest: {key} file {name!r} must be a plain file name inside the bundle")
    return out


def check_creds(text: str, where: str = "creds") -> dict[str, Any]:
    """The user claims of a .creds text whose JWT is a user JWT for the seed beside it."""
    try:
        jwt, seed = parse_creds(text)
        claims = decode(jwt)
    except (CredsError, JWTError) as e:
        raise BundleError(f"{where}: {e}") from None
    nats_ = claims.get("nats") or {}
    if nats_.get("type") != "user":
        raise BundleError(f"{where}: the JWT is a {nats_.get('type') or 'untyped'} JWT, not a user JWT")
    try:
        pub = nkeys.from_seed(bytearray(seed)).public_key.decode()
    except Exception as e:  # nkeys raises its own error kinds for a damaged seed
        raise BundleError(f"{where}: the seed is not a valid nkey seed: {e or type(e).__name__}") from None
    if pub != claims.get("sub"):
        raise BundleError(f"{where}: the seed's public key {pub} is not the JWT's subject {claims.get('sub')}")
    return claims


_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


def _check_ca(pem: bytes, name: str) -> str:
    """Every certificate of a PEM bundle must parse. One block at a time: load_pem_x509_certificates
    needs cryptography 39, and the .deb runs on Debian bookworm's 38."""
    try:
        text = pem.decode("ascii")
        blocks = _PEM_CERT.findall(pem)
        if not blocks:
            raise ValueError("no BEGIN CERTIFICATE block")
        for block in blocks:
            x509.load_pem_x509_certificate(block)
    except (UnicodeDecodeError, ValueError) as e:
        raise BundleError(f"{name}: not a PEM certificate: {e}") from None
    return text


def from_files(files: dict[str, bytes]) -> Bundle:
    """A bundle from its files (name -> bytes): the manifest and what it names, all checked."""
    raw = files.get(MANIFEST)
    if raw is None:
        raise BundleError("the bundle has no manifest.json")
    m = parse_manifest(raw)
    creds = files.get(m["creds"])
    if creds is None:
        raise BundleError(f"the bundle has no {m['creds']} (named by the manifest's 'creds')")
    try:
        creds_text = creds.decode("utf-8")
    except UnicodeDecodeError:
        raise BundleError(f"{m['creds']}: not text") from None
    check_creds(creds_text, m["creds"])
    ca = ""
    if m["ca"]:
        pem = files.get(m["ca"])
        if pem is None:
            raise BundleError(f"the bundle has no {m['ca']} (named by the manifest's 'ca')")
        ca = _check_ca(pem, m["ca"])
    return Bundle(device=m["device"], hub_urls=m["hub_urls"], creds_text=creds_text, domain=m["domain"],
                  ca_pem=ca, account=m["account"], hub_domain=m["hub_domain"], leafnode=m["leafnode"])


def read(path: str) -> Bundle:
    """A bundle from a directory or a tar.gz (only regular files at its top level, or in one folder)."""
    files: dict[str, bytes] = {}
    if os.path.isdir(path):
        for name in os.listdir(path):
            p = os.path.join(path, name)
            if os.path.isfile(p) and os.path.getsize(p) <= MAX_FILE:
                with open(p, "rb") as f:
                    files[name] = f.read()
        return from_files(files)
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar.getmembers():
                if not member.isfile() or member.size > MAX_FILE:
                    continue
                f = tar.extractfile(member)
                if f is not None:
                    files[os.path.basename(member.name)] = f.read()
    except FileNotFoundError:
        raise BundleError(f"{path}: no such file or directory") from None
    except (tarfile.TarError, OSError, EOFError) as e:
        raise BundleError(f"{path}: not a directory or a readable tar.gz: {e}") from None
    return from_files(files)


def write(bundle: Bundle, path: str) -> None:
    """Write a bundle as a tar.gz (path ending .tar.gz/.tgz) or a directory; files are 0600 (a secret)."""
    files = bundle.files()
    if path.endswith((".tar.gz", ".tgz")):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for name, data in sorted(files.items()):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o600
                tar.addfile(info, io.BytesIO(data))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(buf.getvalue())
        return
    os.makedirs(path, mode=0o700, exist_ok=True)
    for name, data in files.items():
        fd = os.open(os.path.join(path, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def make(device: str, hub_urls: list[str], jwt: str, seed: bytes | str, **kw: Any) -> Bundle:
    """A bundle for a freshly minted user."""
    return Bundle(device=device, hub_urls=list(hub_urls), creds_text=format_creds(jwt, seed), **kw)
