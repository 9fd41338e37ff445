"""edged: an edge gateway that speaks NATS, MQTT and JetStream."""

__version__ = "0.1.0"

# The JetStream API level edged implements in full: the one number clients, hubs and `Nats-Required-Api-Level`
# requests judge it by (nats-server's JSApiLevel, server/jetstream_versioning.go). A level counts only when
# every level below it is complete too. What each level requires (README, "JetStream API levels"):
#   0 (2.10): the JetStream API of nats-server 2.10.
#   1 (2.11): per-message TTL (`allow_msg_ttl`, Nats-TTL), subject delete markers (`subject_delete_marker_ttl`),
#             consumer pause, consumer priority groups (overflow, pinned_client, Nats-Pin-Id, unpin).
#   2 (2.12): counters (`allow_msg_counter`), atomic batch publish (`allow_atomic`), scheduled messages
#             (`allow_msg_schedules`), `persist_mode`, `Nats-Required-Api-Level` on API requests.
#   3 (2.12.5): a stream snapshot's `window_size`.
#   4 (2.14): fast batch publish (`allow_batched`), the flow_control ack policy, durable sourcing of
#             interest/workqueue streams, consumer reset.
#   5 (2.15): the origin stream's identity (Nats-Stream-Identity) for sourcing.
# Raise it only when a level is complete on main. Level 3 is the snapshot `window_size`: edged has no stream
# snapshots at all (refused as not supported since level 0), so it adds nothing edged could lack.
API_LEVEL = 4

# The nats-server release that first had each API level: the version edged reports to clients and hubs, so
# it never claims more than API_LEVEL (tools read features off the version as much as off the level).
_LEVEL_VERSIONS = {0: "2.10.0", 1: "2.11.0", 2: "2.12.0", 3: "2.12.5", 4: "2.14.0", 5: "2.15.0"}
SERVER_VERSION = _LEVEL_VERSIONS[API_LEVEL]
