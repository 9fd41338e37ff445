"""MQTT topic <-> NATS subject mapping, the same as nats-server's (server/mqtt.go), plus the spec's topic rules.

nats-server's mapping is what lets MQTT devices, NATS clients and streams share messages, so it is
followed character for character (mqttToNATSSubjectConversion, natsSubjectToMQTTTopic):
- `/` is the level separator and becomes `.`; a `/` that starts the topic becomes `/.`, one that
  ends it or is followed by another `/` becomes `./` (so empty levels survive the trip);
- `.` inside a level becomes `//`;
- `+` becomes `*` and `#` becomes `>` (filters only);
- white space and DEL are refused (they would break the NATS wire protocol and the subject tree).
A filter ending in `/#` also matches its parent level, so it needs a second subscription
(`a/#` -> `a.>` and `a`); wildcard filters at the first level (`#`, `+`, `+/...`) do not match
topics that start with `$` [MQTT-4.7.2-1].
"""

from __future__ import annotations

from functools import lru_cache

SHARE_PREFIX = "$share/"
MAX_TOPIC_BYTES = 65535
_UNSUPPORTED = frozenset(" \t\n\r\f\x7f")
# characters that need any work at all: the common topic has none of them and is returned as is
_SPECIAL = frozenset("/.+# \t\n\r\f\x7f")


class TopicError(ValueError):
    """A topic name or filter that MQTT or the mapping to NATS subjects refuses."""


def _convert(mt: str, wildcards: bool) -> str:
    """nats-server's mqttToNATSSubjectConversion."""
    if _SPECIAL.isdisjoint(mt):
        return mt
    out: list[str] = []
    last = ""  # the last character written
    end = len(mt) - 1
    for i, c in enumerate(mt):
        if c == "/":
            if i == 0 or last == ".":
                out.append("/.")
                last = "."
            elif i == end or mt[i + 1] == "/":
                out.append("./")
                last = "/"
            else:
                out.append(".")
                last = "."
        elif c == ".":
            out.append("//")
            last = "/"
        elif c == "+" or c == "#":
            if not wildcards:
                raise TopicError(f"wildcards not allowed in publish's topic: {mt!r}")
            last = "*" if c == "+" else ">"
            out.append(last)
        elif c in _UNSUPPORTED:
            raise TopicError(f"character not supported for MQTT topics: {mt!r}")
        else:
            out.append(c)
            last = c
    if last == ".":
        out.append("/")
    return "".join(out)


# a device publishes to a few topics over and over and a subject is delivered to many subscribers: both
# directions are memoized (a failed conversion raises every time, it is never cached)
@lru_cache(maxsize=4096)
def topic_to_subject(topic: str) -> str:
    """The NATS subject an MQTT PUBLISH to `topic` goes to (nats-server's mqttTopicToNATSPubSubject)."""
    return _convert(topic, False)


def filter_to_subject(topic_filter: str) -> str:
    """The NATS subject of an MQTT topic filter (nats-server's mqttFilterToNATSSubject)."""
    return _convert(topic_filter, True)


def needs_level_up(subject: str) -> bool:
    """True when a filter subject ends in `.>`: MQTT's `a/#` also matches `a` (nats-server's mqttNeedSubForLevelUp)."""
    return len(subject) >= 3 and subject.endswith(".>")


def filter_to_subjects(topic_filter: str) -> list[str]:
    """Every NATS subject a subscription to `topic_filter` needs: `a/#` -> [`a.>`, `a`]."""
    subject = _convert(topic_filter, True)
    if needs_level_up(subject):
        return [subject, subject[:-2]]
    return [subject]


@lru_cache(maxsize=4096)
def subject_to_topic(subject: str) -> str:
    """The MQTT topic a NATS message on `subject` is delivered with (nats-server's natsSubjectToMQTTTopic)."""
    if "/" not in subject:
        return subject.replace(".", "/")
    out: list[str] = []
    n = len(subject)
    i = 0
    while i < n:
        c = subject[i]
        if c == "/":
            if i < n - 1:
                nxt = subject[i + 1]
                if nxt == ".":
                    out.append("/")
                    i += 1
                elif nxt == "/":
                    out.append(".")
                    i += 1
            # a lone `/` (not from an MQTT topic) is dropped, as nats-server drops it
        elif c == ".":
            out.append("/")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def is_reserved_subscription(subject: str) -> bool:
    """True for a filter subject whose first level is a wildcard (`>`, `*`, `*.…`): it must not match `$` topics."""
    if len(subject) == 1:
        return subject == ">" or subject == "*"
    return len(subject) > 1 and subject[0] == "*" and subject[1] == "."


def ignore_for_reserved(reserved: bool, subject: str) -> bool:
    """True when a message on `subject` must not reach a reserved (first-level wildcard) subscription."""
    return reserved and subject[:1] == "$"


def validate_topic_name(topic: str) -> None:
    """The spec's rules for a PUBLISH / will topic name [MQTT-4.7.1, 4.7.3]."""
    if not topic:
        raise TopicError("topic cannot be empty")
    if "+" in topic or "#" in topic:
        raise TopicError(f"wildcards not allowed in publish's topic: {topic!r}")
    if "\x00" in topic:
        raise TopicError("invalid null character in topic")
    if len(topic.encode()) > MAX_TOPIC_BYTES:
        raise TopicError("topic longer than 65535 bytes")


def validate_topic_filter(topic_filter: str) -> None:
    """The spec's rules for a topic filter: `#` only as the whole last level, `+` only as a whole level."""
    if not topic_filter:
        raise TopicError("topic filter cannot be empty")
    if "\x00" in topic_filter:
        raise TopicError("invalid null character in topic filter")
    if len(topic_filter.encode()) > MAX_TOPIC_BYTES:
        raise TopicError("topic filter longer than 65535 bytes")
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != last):
            raise TopicError(f"'#' must be the whole last level of a topic filter: {topic_filter!r}")
        if "+" in level and level != "+":
            raise TopicError(f"'+' must be a whole level of a topic filter: {topic_filter!r}")


def parse_shared(topic_filter: str) -> tuple[str | None, str]:
    """Split an MQTT 5 shared subscription `$share/<group>/<filter>` into (group, filter); (None, filter) otherwise."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    group, sep, rest = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not group or "+" in group or "#" in group:
        raise TopicError(f"invalid share name in {topic_filter!r}")
    if not sep or not rest:
        raise TopicError(f"shared subscription without a topic filter: {topic_filter!r}")
    return group, rest
