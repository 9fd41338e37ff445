"""`edged status`: the backlog of a running edged, read from its monitoring port (/jsz's `edged_backlog`),
as a table for people or JSON for scripts.

Separate from the server on purpose: it is a client of the HTTP monitoring port (standard library only),
so it works against any edged it can reach, and the server carries no code for it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from edged.goformat import ZERO_TIME

DEFAULT_SERVER = "http://127.0.0.1:8222"
TIMEOUT_S = 5.0


class StatusError(Exception):
    """The monitoring port could not be read (the message is the one line shown)."""


def server_url(server: str | None, port: int | None) -> str:
    """The monitoring base URL from `--server URL|HOST:PORT` or `-m PORT` (default 127.0.0.1:8222)."""
    if port is not None:
        return f"http://127.0.0.1:{port}"
    if not server:
        return DEFAULT_SERVER
    if "://" not in server:
        server = "http://" + server
    return server.rstrip("/")


def fetch(base: str) -> dict[str, Any]:
    url = base + "/jsz"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:  # noqa: S310 (an http URL the user gave)
            doc = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise StatusError(f"{url}: HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise StatusError(f"cannot read the monitoring port at {base}: {reason}") from None
    except ValueError:
        raise StatusError(f"{url} did not answer with JSON (is this an edged monitoring port?)") from None
    if not isinstance(doc, dict):
        raise StatusError(f"{url} did not answer with a JSON object")
    b = doc.get("edged_backlog")
    if b is None:
        if "server_id" in doc:
            raise StatusError(f"{base} has no edged backlog: not an edged, or neither JetStream nor leafnode "
                              "remotes are configured")
        raise StatusError(f"{url} is not a /jsz document")
    return {"server_id": doc.get("server_id", ""), "now": doc.get("now", ""), **b}


# ------------------------------------------------------------------------------------ the table


def duration(s: float | None) -> str:
    """A short human duration: 850ms, 12.3s, 4m05s, 2h03m, 3d04h; `-` when unknown."""
    if s is None:
        return "-"
    if s < 0:
        s = 0.0
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def size(n: int) -> str:
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if v < 1024 or unit == "GiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{n} B"


def _rate(r: float | None) -> str:
    return "-" if r is None else f"{r:.0f}/s" if r >= 10 else f"{r:.1f}/s"


def _when(t: str) -> str:
    return "never" if not t or t == ZERO_TIME else t


def _expiry(c: dict[str, Any]) -> str:
    if not c.get("expires"):
        return "never"
    when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(c["expires"]))
    left = c.get("expires_in_seconds")
    if left is not None and left <= 0:
        return f"{when} (EXPIRED)"
    return f"{when} (in {duration(left)})" + (" EXPIRING SOON" if c.get("expiring") else "")


def _creds_state(c: dict[str, Any]) -> str:
    if c.get("problem"):
        return "ROTATION FAILED: " + c["problem"]
    if c.get("trying_new"):
        return "trying new creds"
    return "ok"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers).rstrip()] + [fmt.format(*r).rstrip() for r in rows]


def render(doc: dict[str, Any]) -> str:
    out: list[str] = []
    rem = doc.get("leaf_remotes") or []
    out.append("Leafnode remotes")
    if rem:
        out += _table(["ACCOUNT", "URL", "STATE", "SINCE", "RTT", "LAST ERROR"], [[
            r["account"], r["url"] or ",".join(r["urls"]), "connected" if r["connected"] else "DOWN",
            _when(r["since"]), duration(r["rtt_seconds"]), r["last_error"] or "-"] for r in rem])
    else:
        out.append("  none")
    creds = [(r, r["creds"]) for r in rem if r.get("creds")]
    if creds:
        out.append("")
        out.append("Leafnode credentials")
        out += _table(["ACCOUNT", "FILE", "USER", "EXPIRES", "STATE"], [[
            r["account"], c["file"], c["user"][:12] + "..." if c["user"] else "-", _expiry(c), _creds_state(c)]
            for r, c in creds])
    out.append("")
    syncs = doc.get("syncs") or []
    out.append("Mirrors and sources (what edged still has to take)")
    if syncs:
        out += _table(["STREAM", "KIND", "ORIGIN", "API", "STATE", "BEHIND", "BYTES", "OLDEST", "LAST CONTACT",
                       "RATE", "DRAIN"], [[
            f"{s['account']} > {s['stream']}", s["kind"], s["origin"], s["api"],
            "syncing" if s["syncing"] else ("ERROR: " + s["error"] if s["error"] else "waiting"),
            str(s["msgs_behind"]), size(s["bytes_behind"]), duration(s["oldest_age_seconds"]),
            duration(s["last_contact_seconds"]) + " ago" if s["last_contact_seconds"] is not None else "never",
            _rate(s["rate_msgs_per_second"]), duration(s["drain_seconds"])] for s in syncs])
    else:
        out.append("  none")
    out.append("")
    org = doc.get("origin_consumers") or []
    out.append("Hub consumers on edged's streams (what the hub still has to take)")
    if org:
        out += _table(["STREAM", "FILTER", "CONSUMER", "STATE", "PENDING", "BYTES", "LAST DELIVERY", "RATE",
                       "DRAIN"], [[
            f"{o['account']} > {o['stream']}", ",".join(o["filters"]) or ">", o["consumer"],
            "active" if o["active"] else "gone", str(o["pending_msgs"]), size(o["pending_bytes"]),
            _when(o["last_delivery"]), _rate(o["rate_msgs_per_second"]), duration(o["drain_seconds"])]
            for o in org])
    else:
        out.append("  none")
    return "\n".join(out)


# ------------------------------------------------------------------------------------ the command


def parser(usage: str, description: str, formatter: type[argparse.HelpFormatter],
           parser_class: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = parser_class(prog="edged status", add_help=False, allow_abbrev=False, formatter_class=formatter,
                     usage=usage, description=description)
    p.add_argument("-h", "--help", action="help", help="show this help and exit")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-s", "--server", dest="server", metavar="URL",
                       help=f"monitoring URL or HOST:PORT (default {DEFAULT_SERVER.removeprefix('http://')})")
    where.add_argument("-m", "--http_port", dest="http_port", type=int, metavar="PORT",
                       help="monitoring port on 127.0.0.1")
    p.add_argument("--json", action="store_true", help="print the figures as JSON, for scripts")
    return p


def run(ns: argparse.Namespace) -> int:
    try:
        doc = fetch(server_url(ns.server, ns.http_port))
    except StatusError as e:
        print(f"edged status: {e}", file=sys.stderr)
        return 1
    if ns.json:
        print(json.dumps(doc, indent=2))
    else:
        print(render(doc))
    return 0
