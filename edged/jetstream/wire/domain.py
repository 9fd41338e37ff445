"""JetStream's subject rules across domains, in one place for the engine and the leafnode link.

A JetStream domain answers its API on `$JS.<domain>.API.>` as well as `$JS.API.>`; over a leafnode the
local API (`$JS.API.>`, `$KV.>`, `$OBJ.>`) never crosses (the hub has its own), while the hub reaches
edged's JetStream through the domain prefix. JetStream deliveries that cross a leafnode carry
`<ack reply>@<original subject>` in their reply. Facts: ../shared/docs/leafnode-protocol.md §3.4, §5;
nats-server's jetstream_api.go (generateJSMappingTable) and leafnode.go.
"""

from __future__ import annotations

from typing import Any

API_PREFIX = "$JS.API."
ACK_PREFIX = b"$JS.ACK."
# the local JetStream's own subjects: a spoke never advertises nor forwards them to the hub, and drops
# them when they come back
LOCAL_ONLY = ("$JS.API.>", "$KV.>", "$OBJ.>")
LOCAL_ONLY_PREFIXES = (b"$JS.API.", b"$KV.", b"$OBJ.")
# what a domain's API prefix maps (nats-server generateJSMappingTable)
DOMAIN_SUFFIXES = ("INFO", "STREAM.>", "CONSUMER.>", "DIRECT.>", "META.>", "SERVER.>", "ACCOUNT.>", "$KV.>",
                   "$OBJ.>")


def api_prefix(domain: str) -> str:
    """`$JS.<domain>.API.` for a domain, "" without one."""
    return f"$JS.{domain}.API." if domain else ""


def domain_subjects(domain: str) -> list[str]:
    """The subjects a leaf advertises so the hub can reach its JetStream through the domain."""
    return [f"$JS.{domain}.API.{s}" for s in DOMAIN_SUFFIXES] if domain else []


def api_subject_of(subject_b: bytes, own_prefix: bytes) -> bytes:
    """A request to this server's domain (`$JS.<domain>.API.<rest>`) as the local API subject it stands
    for: `$JS.API.<rest>`, or `$KV.…` / `$OBJ.…` as they are."""
    rest = subject_b[len(own_prefix):]
    if rest.startswith(b"$KV.") or rest.startswith(b"$OBJ."):
        return rest
    return b"$JS.API." + rest


def decode_ack_reply(subject: bytes, reply: bytes) -> tuple[bytes, bytes]:
    """(original subject, ack reply) of a JetStream delivery that crossed a leafnode: its reply is
    `<ack reply>@<original subject>` (§3.4); anything else is returned as it is."""
    if not reply.startswith(ACK_PREFIX) or b"@" not in reply:
        return subject, reply
    i = reply.find(b"@")
    while i >= 0:
        if reply.count(b".", 0, i) >= 8:
            orig = reply[i + 1:]
            return (orig or subject), reply[:i]
        i = reply.find(b"@", i + 1)
    return subject, reply


def leaf_domain_problem(enabled: bool, domain: str, hub_info: dict[str, Any], account: str) -> str:
    """Why a leaf with this JetStream must not connect to this hub ("" when it may): JetStream behind a
    leafnode needs a domain of its own, different from the hub's (§5.2), which the hub does not check."""
    if not enabled:
        return ""
    hub_domain = str(hub_info.get("domain") or "")
    if not domain:
        return (f"JetStream domain missing: local JetStream needs a `domain` (different from the hub's "
                f"{hub_domain or 'default'!r}) to run behind a leafnode link; not connecting account "
                f"{account!r}")
    if hub_info.get("jetstream") and hub_domain == domain:
        return (f"JetStream domain conflict: local domain {domain!r} equals the hub's; the two JetStreams "
                f"would answer each other's requests. Use a different domain; not connecting account "
                f"{account!r}")
    return ""


def hub_out_deny(domain: str, leaf_domain: str) -> tuple[bytes, ...]:
    """Subject prefixes a hub never sends to a leaf (§5.2, nats-server addLeafNodeConnection): the local
    API, and the hub's own domain API when the leaf runs another domain (it must not answer for it)."""
    if domain and leaf_domain != domain:
        return LOCAL_ONLY_PREFIXES + (api_prefix(domain).encode(),)
    return LOCAL_ONLY_PREFIXES
