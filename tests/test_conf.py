"""The config syntax parser (nats-server's conf format), pure: every form, includes, variables, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.conf import ConfigError, parse, parse_file


def test_separators_blocks_arrays_and_comments() -> None:
    c = parse("""
# comment
a: 1
b = "two"   // trailing comment
c 3
d { x: true, y: [1, 2, 3] }
e [
  "p"
  "q"
]
f: off
g: yes
""")
    assert c == {"a": 1, "b": "two", "c": 3, "d": {"x": True, "y": [1, 2, 3]}, "e": ["p", "q"], "f": False,
                 "g": True}


def test_sizes_and_raw_text() -> None:
    c = parse("a: 1KB\nb: 2k\nc: 3MB\nd: 1G\ne: 2m\n")
    assert (c["a"], c["b"], c["c"], c["d"]) == (1024, 2000, 3 * 1024 * 1024, 1000**3)
    assert c.raw["e"] == "2m"  # a duration that lexed as a size keeps its text for the mapping layer


def test_variables_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGED_TEST_PORT", "4999")
    c = parse("PW: s3cret\nport: $EDGED_TEST_PORT\nauth { password: $PW }\n")
    assert c["port"] == 4999 and c["auth"]["password"] == "s3cret"
    with pytest.raises(ConfigError, match="variable reference"):
        parse("a: $NOT_DEFINED_ANYWHERE_X\n")


def test_include_is_relative_to_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "accounts.conf").write_text("accounts { A: { users: [ {user: a, password: a} ] } }\n")
    main = tmp_path / "main.conf"
    main.write_text("port: 1\ninclude ./sub/accounts.conf\n")
    c = parse_file(main)
    assert c["port"] == 1 and c["accounts"]["A"]["users"][0]["user"] == "a"


def test_bcrypt_hashes_unquoted() -> None:
    c = parse("password: $2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG\n")
    assert c["password"].startswith("$2a$11$")


def test_positions_in_errors(tmp_path: Path) -> None:
    p = tmp_path / "bad.conf"
    p.write_text("a: 1\nb {\n  c: [1, 2\n")
    with pytest.raises(ConfigError) as e:
        parse_file(p)
    assert str(e.value).startswith(f"{p}:")
    c = parse("a: 1\n  b: 2\n", "x.conf")
    assert str(c.pos["b"]) == "x.conf:2:3"


@settings(max_examples=300)
@given(st.lists(st.sampled_from(list("ab: =\n{}[],\"'#/$1k.") + ["include ", "true", "$a"]), max_size=40)
       .map("".join))
def test_random_input_only_raises_config_error(text: str) -> None:
    try:
        parse(text)
    except ConfigError:
        pass
