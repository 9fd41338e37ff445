"""Provisioning bundles (edged/appliance/bundle.py): the manifest's rules, the files it names checked, a bundle
written as a directory and as a tar.gz read back the same, and any manifest bytes (random, truncated)
either parse or give a BundleError that says why."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import nkeys
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edged.appliance import bundle as b
from edged.appliance import fleet
from edged.security.creds import format_creds
from edged.security.jwt import encode, new_keypair
from tests.support.identity.certs import make_pki

ACC = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
SK = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
JWT, SEED = fleet.mint_user(SK, ACC.public_key.decode(), "dev1", fleet.device_permissions("dev1", "dev1"), 3600)
GOOD = {"format": 1, "device": "dev1", "domain": "dev1", "hub_urls": ["tls://hub.example.com:7422"],
        "creds": "device.creds"}


def files(manifest: dict | None = None, **more: bytes) -> dict[str, bytes]:
    out = {"manifest.json": json.dumps(GOOD if manifest is None else manifest).encode(),
           "device.creds": format_creds(JWT, SEED).encode()}
    out.update(more)
    return out


def test_a_good_bundle() -> None:
    got = b.from_files(files())
    assert (got.device, got.domain, got.hub_urls) == ("dev1", "dev1", ["tls://hub.example.com:7422"])
    assert got.user_key == got.claims()["sub"] and got.expires > 0


@pytest.mark.parametrize("change, says", [
    ({"device": ""}, "'device' is required"),
    ({"device": "a b"}, "device name"),
    ({"domain": "a.b"}, "domain"),
    ({"hub_urls": []}, "hub_urls"),
    ({"hub_urls": ["hub:7422"]}, "is not a URL"),
    ({"hub_urls": ["http://hub:7422"]}, "scheme 'http'"),
    ({"hub_urls": ["tls://"]}, "no host"),
    ({"format": 2}, "format 2 is not supported"),
    ({"creds": "../etc/passwd"}, "plain file name"),
    ({"creds": "other.creds"}, "no other.creds"),
    ({"ca": "ca.pem"}, "no ca.pem"),
    ({"leafnode": {"hub": True}}, "leafnode setting 'hub'"),
    ({"leafnode": {"deny_imports": "x"}}, "list of subjects"),
    ({"account": 5}, "'account' must be a string"),
])
def test_manifest_rules(change: dict, says: str) -> None:
    with pytest.raises(b.BundleError, match=says.replace("(", r"\(")):
        b.from_files(files({**GOOD, **change}))


def test_creds_checked() -> None:
    other = new_keypair(nkeys.PREFIX_BYTE_USER)
    for creds, says in ((b"junk", "malformed"), (format_creds(JWT, other.seed).encode(), "not the JWT's subject"),
                        (format_creds(encode({"sub": ACC.public_key.decode(), "nats": {"type": "account"}}, SK),
                                      SEED).encode(), "not a user JWT")):
        with pytest.raises(b.BundleError, match=says):
            b.from_files({**files(), "device.creds": creds})
    with pytest.raises(b.BundleError, match="no manifest.json"):
        b.from_files({"device.creds": b""})


def test_ca_checked(tmp_path: Path) -> None:
    pki = make_pki(str(tmp_path))
    ca = Path(pki["ca"]).read_bytes()
    assert b.from_files(files({**GOOD, "ca": "ca.pem"}, **{"ca.pem": ca})).ca_pem == ca.decode()
    with pytest.raises(b.BundleError, match="not a PEM certificate"):
        b.from_files(files({**GOOD, "ca": "ca.pem"}, **{"ca.pem": b"-----BEGIN CERTIFICATE-----\nxx\n"}))


@pytest.mark.parametrize("name", ["out", "out.tar.gz"])
def test_written_and_read_back(tmp_path: Path, name: str) -> None:
    orig = b.make("dev1", ["nats-leaf://h:7422"], JWT, SEED, domain="d1", hub_domain="hub", account="LOCAL",
                  leafnode={"deny_imports": ["secret.>"]})
    path = str(tmp_path / name)
    b.write(orig, path)
    assert Path(path).stat().st_mode & 0o077 == 0
    got = b.read(path)
    assert got == orig


def test_an_archive_with_a_folder_and_odd_members(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files().items():
            info = tarfile.TarInfo(f"dev1/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("dev1/evil")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/shadow"
        tar.addfile(link)
    p = tmp_path / "b.tgz"
    p.write_bytes(buf.getvalue())
    assert b.read(str(p)).device == "dev1"
    p.write_bytes(buf.getvalue()[:100])
    with pytest.raises(b.BundleError, match="not a directory or a readable tar.gz"):
        b.read(str(p))


@given(st.binary(max_size=300))
def test_random_manifest_bytes(data: bytes) -> None:
    try:
        b.parse_manifest(data)
    except b.BundleError:
        pass


@given(st.integers(min_value=0, max_value=200))
def test_truncated_manifest(cut: int) -> None:
    data = json.dumps(GOOD).encode()
    try:
        m = b.parse_manifest(data[:cut])
    except b.BundleError:
        return
    assert m["device"] == "dev1"


@given(st.dictionaries(st.sampled_from(["device", "domain", "hub_urls", "creds", "ca", "account", "leafnode",
                                        "format"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10),
                                 st.lists(st.text(max_size=10), max_size=3), st.dictionaries(st.text(max_size=5),
                                                                                              st.booleans(), max_size=2))))
def test_random_manifest_fields(m: dict) -> None:
    try:
        b.parse_manifest(json.dumps(m).encode())
    except b.BundleError:
        pass
