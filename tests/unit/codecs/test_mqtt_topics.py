"""MQTT topic <-> NATS subject mapping: the cases of nats-server's mqtt_test.go tables, plus the spec's rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridges.mqtt.topics import (
    TopicError,
    filter_to_subject,
    filter_to_subjects,
    ignore_for_reserved,
    is_reserved_subscription,
    parse_shared,
    subject_to_topic,
    topic_to_subject,
    validate_topic_filter,
    validate_topic_name,
)

# (MQTT topic, NATS subject): TestMQTTTopicAndSubjectConversion in nats-server's server/mqtt_test.go
TOPIC_SUBJECT = [
    ("/", "/./"),
    ("//", "/././"),
    ("///", "/./././"),
    ("////", "/././././"),
    ("foo", "foo"),
    ("/foo", "/.foo"),
    ("//foo", "/./.foo"),
    ("///foo", "/././.foo"),
    ("///foo/", "/././.foo./"),
    ("///foo//", "/././.foo././"),
    ("///foo///", "/././.foo./././"),
    ("//.foo.//", "/././/foo//././"),
    ("foo/bar", "foo.bar"),
    ("/foo/bar", "/.foo.bar"),
    ("/foo/bar/", "/.foo.bar./"),
    ("foo/bar/baz", "foo.bar.baz"),
    ("/foo/bar/baz", "/.foo.bar.baz"),
    ("/foo/bar/baz/", "/.foo.bar.baz./"),
    ("bar/", "bar./"),
    ("bar//", "bar././"),
    ("bar///", "bar./././"),
    ("foo//bar", "foo./.bar"),
    ("foo///bar", "foo././.bar"),
    ("foo////bar", "foo./././.bar"),
    (".", "//"),
    ("..", "////"),
    ("...", "//////"),
    ("./", "//./"),
    (".//.", "//././/"),
    ("././.", "//.//.//"),
    ("././/.", "//.//././/"),
    (".foo", "//foo"),
    ("foo.", "foo//"),
    (".foo.", "//foo//"),
    ("foo../bar/", "foo////.bar./"),
    ("foo../bar/.", "foo////.bar.//"),
    ("/foo/", "/.foo./"),
    ("./foo/.", "//.foo.//"),
    ("foo.bar/baz", "foo//bar.baz"),
]

# TestMQTTFilterConversion in nats-server's server/mqtt_test.go
FILTER_SUBJECT = [
    ("+", "*"),
    ("/+", "/.*"),
    ("+/", "*./"),
    ("/+/", "/.*./"),
    ("foo/+", "foo.*"),
    ("foo/+/", "foo.*./"),
    ("foo/+/bar", "foo.*.bar"),
    ("foo/+/+", "foo.*.*"),
    ("foo/+/+/", "foo.*.*./"),
    ("foo/+/+/bar", "foo.*.*.bar"),
    ("foo//+", "foo./.*"),
    ("foo//+/", "foo./.*./"),
    ("foo//+//", "foo./.*././"),
    ("foo//+//bar", "foo./.*./.bar"),
    ("foo///+///bar", "foo././.*././.bar"),
    ("foo.bar///+///baz", "foo//bar././.*././.baz"),
    ("#", ">"),
    ("/#", "/.>"),
    ("/foo/#", "/.foo.>"),
    ("foo/#", "foo.>"),
    ("foo//#", "foo./.>"),
    ("foo///#", "foo././.>"),
    ("foo/bar/#", "foo.bar.>"),
    ("foo/bar.baz/#", "foo.bar//baz.>"),
    # NATS wildcard characters in MQTT filters are not escaped (nats-server's table says so)
    ("foo*/bar", "foo*.bar"),
    ("foo>/bar", "foo>.bar"),
    ("foo/*/bar", "foo.*.bar"),
    ("foo/*/bar/*", "foo.*.bar.*"),
    ("foo/>", "foo.>"),
    ("foo/*/bar/>", "foo.*.bar.>"),
]


@pytest.mark.parametrize(("topic", "subject"), TOPIC_SUBJECT)
def test_topic_to_subject_and_back(topic: str, subject: str) -> None:
    assert topic_to_subject(topic) == subject
    assert subject_to_topic(subject) == topic


@pytest.mark.parametrize(("topic_filter", "subject"), FILTER_SUBJECT)
def test_filter_to_subject(topic_filter: str, subject: str) -> None:
    assert filter_to_subject(topic_filter) == subject


@pytest.mark.parametrize(
    ("topic", "message"),
    [
        ("foo/+", "wildcards not allowed in publish"),
        ("foo/#", "wildcards not allowed in publish"),
        ("foo bar", "not supported"),
        ("foo\x7fbar", "not supported"),
        ("foo\tbar", "not supported"),
        ("foo\nbar", "not supported"),
        ("foo\rbar", "not supported"),
        ("foo\fbar", "not supported"),
    ],
)
def test_topic_errors(topic: str, message: str) -> None:
    with pytest.raises(TopicError, match=message):
        topic_to_subject(topic)


def test_filter_with_white_space_is_refused() -> None:
    with pytest.raises(TopicError, match="not supported"):
        filter_to_subject("foo/ /#")


@pytest.mark.parametrize(
    ("topic_filter", "subjects"),
    [
        ("foo/#", ["foo.>", "foo"]),
        ("foo/bar/#", ["foo.bar.>", "foo.bar"]),
        ("/#", ["/.>", "/"]),
        ("#", [">"]),
        ("foo/+", ["foo.*"]),
        ("foo", ["foo"]),
    ],
)
def test_multi_level_filter_also_matches_its_parent(topic_filter: str, subjects: list[str]) -> None:
    assert filter_to_subjects(topic_filter) == subjects


@pytest.mark.parametrize(
    ("topic_filter", "reserved"),
    [("#", True), ("+", True), ("+/foo", True), ("+/+", True), ("foo/#", False), ("$SYS/#", False), ("foo", False)],
)
def test_first_level_wildcards_are_reserved(topic_filter: str, reserved: bool) -> None:
    assert is_reserved_subscription(filter_to_subject(topic_filter)) is reserved


def test_reserved_subscriptions_ignore_dollar_topics() -> None:
    assert ignore_for_reserved(True, topic_to_subject("$SYS/broker/load"))
    assert not ignore_for_reserved(True, topic_to_subject("sys/broker/load"))
    assert not ignore_for_reserved(False, topic_to_subject("$SYS/broker/load"))


@pytest.mark.parametrize("topic", ["a", "a/b", "/", "a//b", "$SYS/x", "sport/tennis/player1", "ü/日本"])
def test_valid_topic_names(topic: str) -> None:
    validate_topic_name(topic)


@pytest.mark.parametrize("topic", ["", "a/+", "a/#", "#", "a\x00b", "a" * 65536])
def test_invalid_topic_names(topic: str) -> None:
    with pytest.raises(TopicError):
        validate_topic_name(topic)


@pytest.mark.parametrize(
    "topic_filter",
    ["#", "+", "a/#", "a/+/b", "+/+", "/+", "sport/tennis/#", "sport/+/player1", "+/tennis/#", "a//b", "/"],
)
def test_valid_topic_filters(topic_filter: str) -> None:
    validate_topic_filter(topic_filter)


# the spec's own invalid examples (4.7.1.2, 4.7.1.3) and the empty filter [MQTT-4.7.3-1]
@pytest.mark.parametrize("topic_filter", ["", "sport/tennis#", "sport/tennis/#/ranking", "sport+", "a/b+/c", "#/a", "a\x00"])
def test_invalid_topic_filters(topic_filter: str) -> None:
    with pytest.raises(TopicError):
        validate_topic_filter(topic_filter)


def test_shared_subscriptions() -> None:
    assert parse_shared("$share/g1/a/+/b") == ("g1", "a/+/b")
    assert parse_shared("a/b") == (None, "a/b")
    for bad in ("$share//a", "$share/g", "$share/g/", "$share/g+/a", "$share/#/a"):
        with pytest.raises(TopicError):
            parse_shared(bad)


# printable topics without the characters the mapping refuses or treats as wildcards
_topics = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="+#\x7f \x00\t\n\r\f"),
    min_size=1,
    max_size=40,
)


@given(_topics)
def test_every_topic_survives_the_round_trip(topic: str) -> None:
    subject = topic_to_subject(topic)
    assert subject_to_topic(subject) == topic
    # a subject made from a topic never has an empty NATS token, so NATS clients can subscribe to it
    assert "" not in subject.split(".")


@given(_topics)
def test_a_filter_without_wildcards_is_its_topic(topic: str) -> None:
    assert filter_to_subject(topic) == topic_to_subject(topic)
