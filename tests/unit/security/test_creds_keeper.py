"""A leafnode remote's creds rotation (edged/leafnode/credsfile.py), on real files: a change is a candidate,
kept once the hub accepts it, given up for the previous creds when the hub refuses it (and not retried
until the file changes again); an unreadable new file keeps the creds in use; expiry within the window."""

from __future__ import annotations

import os
from pathlib import Path

import nkeys
import pytest

from edged.appliance import fleet
from edged.leafnode.credsfile import CredsKeeper, CredsSettings
from edged.security.creds import CredsError, format_creds
from edged.security.jwt import new_keypair

ACC = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)


def creds(validity: int = 3600, now: int | None = None) -> str:
    jwt, seed = fleet.mint_user(ACC, ACC.public_key.decode(), "d", {}, validity, now=now)
    return format_creds(jwt, seed)


def write(p: Path, text: str) -> None:
    p.write_text(text)
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a distinct mtime even on coarse clocks


def test_rotation_accepted(tmp_path: Path) -> None:
    p = tmp_path / "d.creds"
    write(p, creds())
    k = CredsKeeper(str(p))
    first = k.credentials()
    k.accepted()
    assert not k.poll()  # nothing changed
    write(p, creds())
    assert k.poll() and k.trying and k.current != first
    k.accepted()
    assert not k.trying and k.good == k.current and k.rotations == 1 and k.problem == ""


def test_rotation_refused_goes_back_and_waits_for_another_change(tmp_path: Path) -> None:
    p = tmp_path / "d.creds"
    write(p, creds())
    k = CredsKeeper(str(p))
    good = k.credentials()
    k.accepted()
    bad = creds()
    write(p, bad)
    assert k.poll()
    assert k.refused_by_hub("Authorization Violation")
    assert k.current == good and k.rollbacks == 1 and "refused" in k.problem
    assert not k.poll(force=True)  # the same refused file is not tried again
    write(p, creds())
    assert k.poll() and k.trying
    k.accepted()
    assert k.problem == ""


def test_refused_without_a_previous_one_is_no_rollback(tmp_path: Path) -> None:
    p = tmp_path / "d.creds"
    write(p, creds())
    k = CredsKeeper(str(p))
    k.credentials()
    assert not k.refused_by_hub("Authorization Violation")  # the first creds: nothing to go back to


def test_back_to_the_good_file_and_a_damaged_file(tmp_path: Path) -> None:
    p = tmp_path / "d.creds"
    text = creds()
    write(p, text)
    k = CredsKeeper(str(p))
    good = k.credentials()
    k.accepted()
    write(p, "garbage")
    assert not k.poll() and k.current == good and "keeping the credentials in use" in k.problem
    write(p, creds())
    assert k.poll()
    write(p, text)
    assert k.poll() and k.current == good and not k.trying  # the accepted creds need no second trial


def test_unreadable_at_first_use(tmp_path: Path) -> None:
    with pytest.raises(CredsError, match="cannot read"):
        CredsKeeper(str(tmp_path / "missing.creds")).credentials()


def test_expiry_window(tmp_path: Path) -> None:
    p = tmp_path / "d.creds"
    write(p, creds(validity=2 * 86400, now=1_000_000))
    k = CredsKeeper(str(p))
    k.credentials()
    st = k.status(30, now=1_000_000)
    assert st["expiring"] and st["expires"] == 1_000_000 + 2 * 86400 and st["expires_in_seconds"] == 2 * 86400
    assert not k.status(1, now=1_000_000)["expiring"]
    write(p, creds(validity=0))
    k.poll()
    assert k.status(30)["expires"] == 0 and not k.status(30)["expiring"]


def test_settings() -> None:
    s = CredsSettings.from_block({"creds": {"watch_interval": "500ms", "expiry_warning_days": 7}})
    assert (s.watch_interval, s.expiry_warning_days) == (0.5, 7)
    for bad in ({"creds": {"watch_interval": "0s"}}, {"creds": {"expiry_warning_days": -1}},
                {"creds": {"colour": 1}}, {"creds": 5}):
        with pytest.raises(ValueError):
            CredsSettings.from_block(bad)
