"""Device users minted by `edged fleet` (edged/appliance/fleet.py): the claims nats-server reads (issuer = the
signing key, issuer_account = the account, expiry), the permissions a device's leafnode needs and no more,
validity strings, and seed files. The hub accepting them is in tests/hub/accounts/test_fleet_provision.py."""

from __future__ import annotations

from pathlib import Path

import nkeys
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edged.appliance import fleet
from edged.security.jwt import decode, new_keypair, verify

ACC = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
SK = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)


def test_minted_user_claims() -> None:
    perms = fleet.device_permissions("pump-1", "pump-1", hub_domain="hub")
    jwt, seed = fleet.mint_user(SK, ACC.public_key.decode(), "pump-1", perms, 86400, now=1_700_000_000)
    c = verify(jwt, now=1_700_000_100)
    assert c["iss"] == SK.public_key.decode() and c["nats"]["issuer_account"] == ACC.public_key.decode()
    assert c["sub"] == nkeys.from_seed(bytearray(seed)).public_key.decode() and c["sub"].startswith("U")
    assert c["iat"] == 1_700_000_000 and c["exp"] == 1_700_086_400
    assert c["nats"]["type"] == "user" and c["nats"]["version"] == 2 and c["name"] == "pump-1"
    assert c["nats"]["pub"] == perms["pub"] and c["nats"]["sub"] == perms["sub"]
    with pytest.raises(Exception, match="expired"):
        verify(jwt, now=1_700_086_401)


def test_never_expiring_and_a_bad_account() -> None:
    jwt, _ = fleet.mint_user(SK, ACC.public_key.decode(), "x", {}, 0)
    assert "exp" not in decode(jwt)
    with pytest.raises(fleet.FleetError, match="account"):
        fleet.mint_user(SK, "UNOTANACCOUNT", "x", {}, 0)


def test_device_permissions() -> None:
    p = fleet.device_permissions("pump-1", "d1", hub_domain="hub")
    pub, sub = p["pub"]["allow"], p["sub"]["allow"]
    assert "devices.pump-1.>" in pub and "devices.pump-1.>" in sub
    assert "$JS.d1.API.>" in sub and "$JS.d1.API.>" not in pub  # its domain's API is asked by the hub side
    assert "$JS.hub.API.>" in pub and "$JS.hub.API.>" not in sub  # the hub's API is asked by the edge
    assert "_INBOX.>" in pub and "$JS.ACK.>" in sub and "$JS.FC.>" in pub
    assert not any(s in (">", "devices.>", "$JS.API.>") for s in pub + sub)
    q = fleet.device_permissions("p", "", subjects=["site.a.>"], extra_pub=["x"], extra_sub=["y", "y"])
    assert q["pub"]["allow"][0] == "site.a.>" and "x" in q["pub"]["allow"] and q["sub"]["allow"].count("y") == 1
    assert not any(s.startswith("$JS.") and ".API." in s for s in q["sub"]["allow"] + q["pub"]["allow"])


def test_account_claims_list_the_signing_keys() -> None:
    c = fleet.account_claims(ACC.public_key.decode(), "FLEET", [SK.public_key.decode()])
    assert c["nats"]["signing_keys"] == [SK.public_key.decode()] and c["nats"]["limits"]["leaf"] == -1


@pytest.mark.parametrize("text, secs", [("90d", 90 * 86400), ("2w", 14 * 86400), ("12h", 43200), ("30m", 1800),
                                        ("45s", 45), ("0", 0), ("never", 0), (" 1D ", 86400)])
def test_validity(text: str, secs: int) -> None:
    assert fleet.parse_validity(text) == secs


@given(st.text(max_size=12))
def test_any_validity_text(text: str) -> None:
    try:
        assert fleet.parse_validity(text) >= 0
    except fleet.FleetError as e:
        assert "expiry" in str(e)


def test_seed_files(tmp_path: Path) -> None:
    p = tmp_path / "sk.nk"
    fleet.write_secret(str(p), bytes(SK.seed).decode() + "\n")
    assert p.stat().st_mode & 0o777 == 0o600
    assert fleet.read_seed(str(p), "SA").public_key == SK.public_key
    with pytest.raises(fleet.FleetError, match="expected SO"):
        fleet.read_seed(str(p), "SO")
    p.write_text("nothing here")
    with pytest.raises(fleet.FleetError, match="no nkey seed"):
        fleet.read_seed(str(p), "SA")
    with pytest.raises(fleet.FleetError, match="cannot read"):
        fleet.read_seed(str(tmp_path / "missing"), "SA")
