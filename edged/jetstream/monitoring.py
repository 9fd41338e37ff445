"""JetStream in the monitoring endpoints: the `jetstream` section of /varz, /jsz and /healthz's checks."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from edged import API_LEVEL
from edged.goformat import rfc3339ns

if TYPE_CHECKING:
    from edged.jetstream.account import JSAccount
    from edged.jetstream.engine import JetStream


def config_dict(js: JetStream) -> dict[str, Any]:
    """nats-server's JetStreamConfig as /varz and /jsz print it."""
    c: dict[str, Any] = {"max_memory": js.space.max_memory, "max_storage": js.space.max_file,
                         "store_dir": js.store_dir}
    si = js.config.sync_interval
    if isinstance(si, str):
        c["sync_interval"] = int(120 * 1e9)
        c["sync_always"] = True
    else:
        c["sync_interval"] = int(si * 1e9)
    if js.domain:
        c["domain"] = js.domain
    c["strict"] = True  # edged always reads API requests strictly (`strict: false` is refused with a warning)
    return c


def stats(js: JetStream) -> dict[str, Any]:
    mem, file = js.space.total_usage()
    rmem, rfile = js.space.total_reserved()
    api: dict[str, Any] = {"level": API_LEVEL, "total": js.dispatch.api_total, "errors": js.dispatch.api_errors}
    if js.dispatch.api_inflight:
        api["inflight"] = js.dispatch.api_inflight
    return {"memory": mem, "storage": file, "reserved_memory": rmem, "reserved_storage": rfile,
            "accounts": len(js.accounts), "ha_assets": 0, "api": api}


def info(js: JetStream) -> dict[str, Any]:
    """The `jetstream` section of /varz."""
    return {"config": config_dict(js), "stats": stats(js)}


def jsz(js: JetStream, opts: Any = None) -> dict[str, Any]:
    """/jsz, with nats-server's options: `accounts`, `streams` (implies accounts), `consumers`
    (implies streams), `config`, `acc` (one account), `offset`/`limit` over accounts."""
    accounts_opt = bool(getattr(opts, "accounts", False))
    streams_opt = bool(getattr(opts, "streams", False))
    consumers_opt = bool(getattr(opts, "consumer", False))
    config_opt = bool(getattr(opts, "config", False))
    only = str(getattr(opts, "account", "") or "")
    offset = int(getattr(opts, "offset", 0) or 0)
    limit = int(getattr(opts, "limit", 0) or 0) or 1024
    if consumers_opt:
        streams_opt = True
    if streams_opt and not only:
        accounts_opt = True
    all_streams = [s for a in js.accounts.values() for s in a.streams.values()]
    out: dict[str, Any] = {
        "server_id": js.server.server_id, "now": rfc3339ns(time.time_ns()), "config": config_dict(js),
        **stats(js), "streams": len(all_streams), "consumers": sum(len(s.consumers) for s in all_streams),
        "messages": sum(s.store.msgs for s in all_streams), "bytes": sum(s.store.bytes for s in all_streams),
    }
    if only and only in js.accounts:
        accounts = [js.accounts[only]]
    elif accounts_opt:
        accounts = sorted(js.accounts.values(), key=lambda a: a.account.name)[offset:][:limit]
    else:
        accounts = []
    if accounts:
        out["account_details"] = [_account_detail(js, jsa, streams_opt, consumers_opt, config_opt)
                                  for jsa in accounts]
    out["total"] = len(js.accounts)  # the accounts with JetStream, as nats-server counts them
    return out


def _account_detail(js: JetStream, jsa: JSAccount, streams: bool, consumers: bool, config: bool) -> dict[str, Any]:
    mem, file = jsa.usage()
    u64 = (1 << 64) - 1
    # nats-server prints the account's limits here, as unsigned numbers (so -1 is 2^64-1)
    d: dict[str, Any] = {"name": jsa.account.name, "id": jsa.account.name, "memory": mem, "storage": file,
                         "reserved_memory": jsa.limits.max_memory & u64,
                         "reserved_storage": jsa.limits.max_file & u64, "accounts": 0, "ha_assets": 0,
                         "api": {"level": 0, "total": jsa.api_total, "errors": jsa.api_errors}}  # (0 here in nats-server too)
    if streams:
        details = []
        for s in jsa.streams.values():
            sd: dict[str, Any] = {"name": s.name, "created": rfc3339ns(s.created),
                                  "cluster": {"leader": js.server.server_name}}
            if config:
                sd["config"] = s.config
            sd["state"] = s.state_dict()
            if consumers and s.consumers:
                infos = []
                for c in s.consumers.values():
                    ci = dict(c.info())
                    ci.pop("type", None)
                    if not config:
                        ci.pop("config", None)
                    infos.append(ci)
                sd["consumer_detail"] = infos
            details.append(sd)
        d["stream_detail"] = details
    return d


def healthz(js: JetStream, account: str = "", stream: str = "", consumer: str = "") -> tuple[bool, str]:
    if js.file_store is None:
        return False, "JetStream not started"
    if account:
        jsa = js.accounts.get(account)
        if jsa is None:
            return False, f"JetStream account '{account}' could not be resolved"
        if stream:
            s = jsa.streams.get(stream)
            if s is None:
                return False, f"JetStream stream '{stream}' could not be found"
            if consumer and consumer not in s.consumers:
                return False, f"JetStream consumer '{consumer}' could not be found"
    return True, ""

