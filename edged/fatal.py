"""Fatal start errors: what failed, worded as nats-server words it, logged as one `[FTL]` line.

A start failure is something an operator fixes in the config or on the machine, so it must read as
nats-server's own line does (`Can't start JetStream: could not create storage directory - mkdir
/x: permission denied`), not as a Python traceback or an errno naming the wrong step.
"""

from __future__ import annotations

import os
import tempfile


class StartError(Exception):
    """The server cannot start; the message is the whole `[FTL]` line."""


def _reason(e: OSError) -> str:
    """The errno's text in Go's case (asyncio rewrites strerror into a longer sentence)."""
    reason = os.strerror(e.errno) if e.errno else str(e)
    return reason[:1].lower() + reason[1:]


def go_os_error(op: str, e: OSError, path: str = "") -> str:
    """An OSError as Go's *PathError prints it (`mkdir /a: no such file or directory`)."""
    target = e.filename if e.filename is not None else path
    return f"{op} {target}: {_reason(e)}" if target else _reason(e)


def prepare_store_dir(path: str) -> None:
    """nats-server's order: create a missing store directory; an existing path (or one that cannot be
    looked at) must be a writable directory."""
    try:
        os.stat(path)
        missing = False
    except FileNotFoundError:
        missing = True
    except OSError:  # ENOTDIR and the like: Go's os.IsNotExist is false, its stat is nil
        raise StartError("Can't start JetStream: storage directory is not a directory") from None
    if missing:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise StartError("Can't start JetStream: could not create storage directory - "
                             f"{go_os_error('mkdir', e, path)}") from None
        return
    if not os.path.isdir(path):
        raise StartError("Can't start JetStream: storage directory is not a directory")
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError:
        raise StartError("Can't start JetStream: storage directory is not writable") from None


def go_listen_error(host: str, port: int, e: OSError) -> str:
    """A failed bind as Go's net package prints it (`listen tcp 0.0.0.0:4222: bind: address already in use`)."""
    return f"listen tcp {host}:{port}: bind: {_reason(e)}"


def listen_error(host: str, port: int, e: OSError) -> StartError:
    """The client port cannot be bound: nats-server's `Error listening on port: host:port, "..."`."""
    return StartError(f'Error listening on port: {host}:{port}, "{go_listen_error(host, port, e)}"')
