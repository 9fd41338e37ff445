"""edged/routing/imports.py's pure parts: the exporter-side subject of a stream import's shadow subscription, the
import's delivery subject, mappings (first match, weights, remainder), nats-server's config errors."""

from __future__ import annotations

import random

import pytest

from edged.routing.imports import StreamImportRule, SubjectMapper, check_config, mapping_problems
from edged.settings.options import (
    AccountConfig,
    Export,
    MapDest,
    Mapping,
    Options,
    ServiceImport,
    StreamImport,
)


def rule(subject: str, to: str = "", prefix: str = "") -> StreamImportRule:
    return StreamImportRule(None, StreamImport("A", subject, to, prefix))  # type: ignore[arg-type]


@pytest.mark.parametrize(("r", "sub", "shadow", "published", "delivered"), [
    (rule("pub.>", prefix="from_a"), "from_a.pub.x.*", "pub.x.*", "pub.x.1", "from_a.pub.x.1"),
    (rule("pub.>", prefix="from_a"), ">", "pub.>", "pub.y", "from_a.pub.y"),
    (rule("pub.>", prefix="from_a"), "other.>", None, "", ""),
    (rule("ev.*.*", to="evt.$2.$1"), "evt.*.one", "ev.one.*", "ev.one.two", "evt.two.one"),
    (rule("ev.*.*", to="evt.$2.$1"), "evt.>", "ev.*.*", "ev.a.b", "evt.b.a"),
    (rule("only.b"), "only.b", "only.b", "only.b", "only.b"),
    (rule("only.b"), "only.*", "only.b", "only.b", "only.b"),
    (rule("lit.a", to="mine.a"), "mine.a", "lit.a", "lit.a", "mine.a"),
    (rule("pub.>"), "pub.x", "pub.x", "pub.x", "pub.x"),
    (rule("pub.*.z"), "pub.q.>", "pub.q.z", "pub.q.z", "pub.q.z"),
])
def test_shadow_subject_and_delivery(r: StreamImportRule, sub: str, shadow: str | None, published: str,
                                     delivered: str) -> None:
    assert r.shadow_subject(sub) == shadow
    if shadow is not None:
        assert r.local_subject(published.encode()).decode() == delivered


def test_mapper_first_match_wildcards_and_weights() -> None:
    m = SubjectMapper([Mapping("orders.flush", [MapDest("orders.central.flush")]),
                       Mapping("orders.*", [MapDest("orders.central.{{wildcard(1)}}")]),
                       Mapping("a.*.*", [MapDest("b.$2.$1")]),
                       Mapping("w", [MapDest("w.one", 30), MapDest("w.two", 30)])])
    assert m.map("orders.flush") == "orders.central.flush"
    assert m.map("orders.x") == "orders.central.x"
    assert m.map("a.1.2") == "b.2.1"
    assert m.map("orders.x.y") is None and m.map("nothing") is None
    random.seed(7)
    seen = [m.map("w") for _ in range(600)]
    # 40% left over: the original subject (None = unchanged)
    assert 120 < seen.count("w.one") < 240 and 120 < seen.count("w.two") < 240 and 160 < seen.count(None) < 320


def test_config_errors_are_nats_servers() -> None:
    o = Options()
    o.accounts = [AccountConfig("A", exports=[Export(service="svc.>"), Export(stream="pub.>", accounts=["C"])]),
                  AccountConfig("B", service_imports=[ServiceImport("A", "x.y"), ServiceImport("Z", "svc.a")],
                                stream_imports=[StreamImport("A", "pub.>"), StreamImport("A", "pub.a", prefix="p.*")]),
                  AccountConfig("C", stream_imports=[StreamImport("A", "pub.a", prefix="p.*")])]
    assert check_config(o) == [
        'Error adding stream import "pub.>": stream import not authorized',
        'Error adding stream import "pub.a": stream import not authorized',
        'Error adding service import "x.y": service import not authorized',
        '"Z" account not defined for service import',
        'Error adding stream import "pub.a": stream import prefix can not contain wildcard tokens',
    ]
    mappings = [Mapping("m.*", [MapDest("n.$2")]), Mapping("k", [MapDest("k.a", 60), MapDest("k.b", 60)]),
                Mapping("p.*", [MapDest("q.{{partition(3,1)}}")])]
    assert [p for m in mappings for p in mapping_problems(m)] == [
        'Error adding mapping for "m.*" to "n.$2" : invalid mapping destination: wildcard index out of range in '
        "$2: [2]",
        'Error adding mapping for "k" : total weight needs to be <= 100',
        "Error adding mapping for \"p.*\" to \"q.{{partition(3,1)}}\" : mapping function '{{partition(3,1)}}' "
        "is not supported by edged",
    ]
