"""NATS `.creds` files: a user JWT and its nkey seed between `-----BEGIN ...-----` fences.

Used to provision edged (leafnode remotes authenticate with them) and by the tests to mint users.
"""

from __future__ import annotations

import os
import re

_BLOCK = re.compile(r"-{3,}[^\n]*-{3,}\r?\n\s*([\w\-.=]+)\s*\r?\n\s*-{3,}[^\n]*-{3,}")


class CredsError(ValueError):
    pass


def parse_creds(text: str) -> tuple[str, bytes]:
    """(user JWT, nkey seed) from the text of a .creds file."""
    blocks = _BLOCK.findall(text)
    if len(blocks) < 2:
        raise CredsError("credentials file malformed: expected a JWT block and a seed block")
    jwt, seed = blocks[0], blocks[1]
    if not seed.startswith("S"):
        raise CredsError("credentials file malformed: the second block is not an nkey seed")
    return jwt, seed.encode()


def read_creds_file(path: str) -> tuple[str, bytes]:
    """(user JWT, nkey seed) from a .creds file; the error names the file."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_creds(f.read())
    except OSError as e:
        raise CredsError(f"cannot read credentials file {path!r}: {e.strerror}") from None
    except CredsError as e:
        raise CredsError(f"{path}: {e}") from None


def format_creds(jwt: str, seed: bytes | bytearray | str) -> str:
    """The text of a .creds file, laid out as `nsc` writes it."""
    s = seed if isinstance(seed, str) else bytes(seed).decode()
    return (f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{s}\n------END USER NKEY SEED------\n\n"
            "*************************************************************\n")


def write_creds_file(path: str, jwt: str, seed: bytes | bytearray | str) -> None:
    """Write a .creds file readable only by its owner (it holds a secret)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(format_creds(jwt, seed))
