"""Subjects <-> topics of the bridge's rules (bridges/mqtt_bridge/topics.py): templates, tails, what is
refused, and properties over random tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridges.mqtt_bridge.topics import (
    TopicError,
    subject_to_topic,
    topic_to_subject,
    valid_topic_filter,
    valid_topic_name,
)


@pytest.mark.parametrize(("subject", "source", "template", "topic"), [
    ("a.b.c", "", "", "a/b/c"),
    ("a.b.c", "a.>", "", "a/b/c"),
    ("telemetry.dev1.temp", "telemetry.*.temp", "site1/{{wildcard(1)}}/t", "site1/dev1/t"),
    ("telemetry.dev1.temp", "telemetry.*.*", "x/$2/$1", "x/temp/dev1"),
    ("telemetry.dev1.temp", "telemetry.*.temp", "v1.0/{{ wildcard( 1 ) }}", "v1.0/dev1"),
    ("tele.a.b.c", "tele.>", "up/#", "up/a/b/c"),
    ("tele.a.b.c", "tele.*.>", "up/$1/#", "up/a/b/c"),
    ("tele.a.b.c", "tele.>", "up/$1", "up/a/b/c"),
    ("dev-1.x", "*.x", "pre-$1-post", "pre-dev-1-post"),
])
def test_subject_to_topic(subject: str, source: str, template: str, topic: str) -> None:
    assert subject_to_topic(subject, source, template) == topic


@pytest.mark.parametrize(("topic", "source", "template", "subject"), [
    ("a/b/c", "", "", "a.b.c"),
    ("cmd/dev1/set", "cmd/+/set", "cmd.$1", "cmd.dev1"),
    ("cfg/a/b", "cfg/#", "cfg.>", "cfg.a.b"),
    ("cfg/a/b", "cfg/#", "local.cfg.{{wildcard(1)}}", "local.cfg.a.b"),
    ("x/y", "+/+", "$2.$1", "y.x"),
])
def test_topic_to_subject(topic: str, source: str, template: str, subject: str) -> None:
    assert topic_to_subject(topic, source, template) == subject


@pytest.mark.parametrize("topic", ["a//b", "/a", "a/", "a.b/c", "a b", "a/*", "a/>", ""])
def test_a_topic_that_cannot_be_a_subject_is_refused(topic: str) -> None:
    with pytest.raises(TopicError):
        topic_to_subject(topic)


def test_a_template_that_makes_no_topic_is_refused() -> None:
    with pytest.raises(TopicError):
        subject_to_topic("a.b", "a.*", "x/$1/+")
    with pytest.raises(TopicError):
        subject_to_topic("a.b", "a.*", "x/$2")


@pytest.mark.parametrize(("f", "ok"), [("a/#", True), ("#", True), ("+/+/#", True), ("a/#/b", False),
                                       ("a/b#", False), ("a+/b", False), ("", False), ("a\x00", False)])
def test_topic_filters(f: str, ok: bool) -> None:
    assert valid_topic_filter(f) is ok


TOKEN = st.text(st.characters(blacklist_characters="./*>#+ \x00", blacklist_categories=("Cs", "Cc", "Zs")),
                min_size=1, max_size=8)


@given(st.lists(TOKEN, min_size=1, max_size=6))
def test_plain_round_trip(tokens: list[str]) -> None:
    subject = ".".join(tokens)
    topic = subject_to_topic(subject)
    assert valid_topic_name(topic) and topic.split("/") == tokens
    assert topic_to_subject(topic) == subject


@given(TOKEN, st.lists(TOKEN, min_size=1, max_size=5))
def test_tail_templates_round_trip(one: str, rest: list[str]) -> None:
    subject = ".".join(["tele", one, *rest])
    topic = subject_to_topic(subject, "tele.*.>", "up/$1/#")
    assert topic == "/".join(["up", one, *rest])
    assert topic_to_subject(topic, "up/+/#", "tele.$1.>") == subject


@given(st.text(max_size=40), st.text(max_size=20), st.text(max_size=20))
def test_random_input_is_a_result_or_a_topic_error(s: str, source: str, template: str) -> None:
    for f in (subject_to_topic, topic_to_subject):
        try:
            out = f(s, source, template)
        except TopicError:
            continue
        assert isinstance(out, str)
