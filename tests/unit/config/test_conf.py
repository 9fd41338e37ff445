"""The config syntax parser (nats-server's conf format): every form, includes, variables, errors.

Pure tests on `edged.conf`, plus one table run through `nats-server -t` so that what edged accepts
and rejects is what nats-server accepts and rejects.
"""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.settings.conf import ConfigError, ConfList, ConfMap, parse, parse_file
from edged.settings.config import load_options
from tests.support.servers import nats_server_path


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
h: { i: { j: k } }; l: m
""")
    assert c == {"a": 1, "b": "two", "c": 3, "d": {"x": True, "y": [1, 2, 3]}, "e": ["p", "q"], "f": False,
                 "g": True, "h": {"i": {"j": "k"}}, "l": "m"}
    assert isinstance(c["d"], ConfMap) and isinstance(c["e"], ConfList)


def test_json_like_documents_and_quoted_keys() -> None:
    assert parse('{ "port": 4222, "tls": { "verify": true }, "arr": [ 1, 2 ] }') == {
        "port": 4222, "tls": {"verify": True}, "arr": [1, 2]}
    assert parse("'a b': 1\n\"c\": 2\n") == {"a b": 1, "c": 2}


def test_strings() -> None:
    c = parse(r"""
sq: 'no \escapes here'
dq: "tab\there \"q\" back\\slash \x41 nl\n"
bare: hello.world-1
escaped_bare: a\tb
mapping: orders.{{wildcard(1)}}
ip: 127.0.0.1
hostport: 10.0.0.1:4222
raw: (
  line one
  line "two"
)
after: 1
""")
    assert c["sq"] == "no \\escapes here"
    assert c["dq"] == 'tab\there "q" back\\slash A nl\n'
    assert c["bare"] == "hello.world-1" and c["escaped_bare"] == "a\tb"
    assert c["mapping"] == "orders.{{wildcard(1)}}"
    assert (c["ip"], c["hostport"]) == ("127.0.0.1", "10.0.0.1:4222")
    assert c["raw"] == '\n  line one\n  line "two"' and c["after"] == 1


def test_numbers_booleans_and_dates() -> None:
    c = parse("a: -5\nb: 1.25\nc: 9223372036854775807\nd: TRUE\ne: No\nf: On\ng: 2020-01-02T03:04:05Z\n")
    assert (c["a"], c["b"], c["c"], c["d"], c["e"], c["f"]) == (-5, 1.25, 2**63 - 1, True, False, True)
    assert c["g"] == datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert type(c["a"]) is int and type(c["d"]) is bool and type(c["b"]) is float


@pytest.mark.parametrize("text,value", [
    ("1k", 1000), ("1K", 1000), ("1kb", 1024), ("1ki", 1024), ("1kib", 1024), ("1KiB", 1024),
    ("3MB", 3 * 1024**2), ("2m", 2 * 1000**2), ("1G", 1000**3), ("2gb", 2 * 1024**3), ("1t", 1000**4),
    ("1tb", 1024**4), ("1p", 1000**5), ("1e", 1000**6), ("-1k", -1000),
])
def test_sizes(text: str, value: int) -> None:
    c = parse(f"a: {text}\n")
    assert c["a"] == value and c.raw["a"] == text  # the raw text is kept for the mapping layer


def test_duplicate_keys_last_wins() -> None:
    c = parse("a: 1\na: 2\nb { x: 1 }\nb { y: 2 }\n")
    assert c == {"a": 2, "b": {"y": 2}}


def test_variables_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGED_TEST_PORT", "4999")
    monkeypatch.setenv("EDGED_TEST_LIST", "[1, 2]")
    c = parse("PW: s3cret\nport: $EDGED_TEST_PORT\nlst: $EDGED_TEST_LIST\nauth { password: $PW }\n")
    assert c["port"] == 4999 and c["lst"] == [1, 2] and c["auth"]["password"] == "s3cret"
    assert "PW" in c.used_vars
    with pytest.raises(ConfigError, match="variable reference"):
        parse("a: $NOT_DEFINED_ANYWHERE_X\n")


def test_variable_scopes() -> None:
    c = parse("X: outer\nb { X: inner, v: $X }\nc { v: $X }\nd { e { v: $X } }\n")
    assert (c["b"]["v"], c["c"]["v"], c["d"]["e"]["v"]) == ("inner", "outer", "outer")
    assert parse("Y: 2\nb { v: $Y }\n")["b"]["v"] == 2
    with pytest.raises(ConfigError, match="'Z' can not be found"):
        parse("b { Z: 1 }\nc { v: $Z }\n")  # a block's variables are not visible outside it


def test_environment_variable_cycle_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGED_CYCLE_A", "$EDGED_CYCLE_B")
    monkeypatch.setenv("EDGED_CYCLE_B", "$EDGED_CYCLE_A")
    with pytest.raises(ConfigError, match="x.conf:1:4: variable reference"):
        parse("a: $EDGED_CYCLE_A\n", "x.conf")


def test_bcrypt_hashes_unquoted() -> None:
    c = parse("password: $2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG\n")
    assert c["password"] == "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG"


def test_include_is_relative_to_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "sub" / "accounts.conf").write_text("accounts { A: { users: [ {user: a, password: a} ] } }\n"
                                                    "include 'deeper/more.conf'\n")
    (tmp_path / "sub" / "deeper" / "more.conf").write_text("debug: true\n")
    (tmp_path / "sub" / "tls.conf").write_text("verify: true\n")
    main = tmp_path / "main.conf"
    main.write_text("port: 1\ninclude ./sub/accounts.conf\ntls {\n  include \"sub/tls.conf\"\n}\n")
    c = parse_file(main)
    assert c["port"] == 1 and c["accounts"]["A"]["users"][0]["user"] == "a" and c["debug"] is True
    assert c["tls"] == {"verify": True}  # include inside a block merges into that block
    p = c.pos["debug"]
    assert (Path(p.file).resolve(), p.line, p.col) == (tmp_path / "sub" / "deeper" / "more.conf", 1, 1)


def test_include_cycles_and_missing_files_are_errors(tmp_path: Path) -> None:
    (tmp_path / "a.conf").write_text("include b.conf\n")
    (tmp_path / "b.conf").write_text("include a.conf\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_file(tmp_path / "a.conf")
    (tmp_path / "m.conf").write_text("port: 1\ninclude ./nope.conf\n")
    with pytest.raises(ConfigError, match=rf"{tmp_path / 'm.conf'}:2:9: error parsing include file './nope.conf'"):
        parse_file(tmp_path / "m.conf")


def test_positions() -> None:
    c = parse("a: 1\n  b: 2\nc {\n\td: [x,\n   y]\n}\n", "x.conf")
    assert [str(c.pos[k]) for k in "abc"] == ["x.conf:1:1", "x.conf:2:3", "x.conf:3:1"]
    assert str(c["c"].pos["d"]) == "x.conf:4:2"
    assert [str(p) for p in c["c"]["d"].pos] == ["x.conf:4:6", "x.conf:5:4"]


@pytest.mark.parametrize("text,where,reason", [
    ("a: 1\nb {\n  c: [1, 2\n", "4:1", "unexpected end of file in array"),
    ("a: \n", "1:4", "expected a value for key 'a' but found new line"),
    ('a: "abc\n', "1:4", "unexpected end of file in quoted string"),
    ("a: 1 2\n", "1:6", "expected a new line, ',' or ';' after a value"),
    ("a: [1,,2]\n", "1:7", "unexpected ',' in array"),
    ("a { ] }\n", "1:5", "unexpected ']' in block"),
    ("a: 1.\n", "1:6", "floats must have a digit after the '.'"),
    ("a: .5\n", "1:4", "floats must start with a digit"),
    ('a: "\\q"\n', "1:6", "invalid escape character 'q'"),
    ("a: 2020-01-02\n", "1:4", "dates must be in full ISO8601 Zulu form"),
    ("a: 99999999999999999999\n", "1:4", "is out of range"),
    ("a: (\nno end\n", "1:4", "unexpected end of file in '(' block"),
    ("a: 1\n}\n", "2:1", "unexpected '}' with no matching '{'"),
])
def test_errors_name_file_line_and_column(tmp_path: Path, text: str, where: str, reason: str) -> None:
    p = tmp_path / "bad.conf"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        parse_file(p)
    assert str(e.value).startswith(f"{p}:{where}: ") and reason in str(e.value)
    assert e.value.pos is not None and f"{e.value.pos.line}:{e.value.pos.col}" == where


# -------------------------------------------------------------------------------- nats-server as reference

ACCEPTED = {
    "colon": "port: 4222",
    "equals": "port = 4222",
    "space": "port 4222",
    "key_newline_separator": "port\n: 4222",
    "json_braces": '{ "port": 4222, "server_name": "x" }',
    "semicolons": "authorization { user: a; password: b }",
    "array_newlines": "authorization { users = [\n {user: a, password: b}\n {user: c, password: d}\n] }",
    "array_trailing_comma": "authorization { users = [ {user: a, password: b}, ] }",
    "top_trailing_separators": "port: 4222,\nserver_name: x;",
    "comments": "# c\nport: 4222 // c2\n// c3\nserver_name: x # c4",
    "single_quotes": "server_name: 'sq'\n'port': 4222",
    "escapes": 'pid_file: "a\\tb\\x41\\"q\\\\"',
    "raw_block": "pid_file: (\nraw block\n)",
    "include": "include ./inc.conf",
    "include_quoted": "include 'inc.conf'",
    "variable": "P = 4333\nport: $P",
    "block_variable": "authorization { U = bob\n user: $U, password: x }",
    "environment": "port: $EDGED_T_ENV",
    "sizes": "max_payload: 1MB\nmax_pending: 64mb\nmax_control_line: 4ki\nmax_connections: 1k",
    "booleans": "debug: yes\ntrace: on\nlogtime: FALSE",
    "float": "authorization { timeout: 0.5 }",
    "negative": "port: -1",
    "ip_and_host_port": "host: 127.0.0.1\nlisten: 127.0.0.1:4222",
    "empty_block": "authorization { }",
}
REJECTED = {
    "missing_value": "port: ",
    "key_only": "port",
    "unterminated_block": "authorization {",
    "unterminated_string": 'server_name: "abc',
    "unterminated_raw_block": "pid_file: (\nabc",
    "bad_escape": 'pid_file: "a\\qb"',
    "missing_include": "include ./missing.conf",
    "undefined_variable": "port: $EDGED_T_UNDEFINED_X",
    "two_values": "port: 42 22",
    "double_comma": "authorization { users = [ {user: a}, , {user: b} ] }",
    "dangling_dot": "authorization { timeout: 1. }",
    "leading_dot": "authorization { timeout: .5 }",
    "bracket_in_block": "authorization { ] }",
    "wrong_type": "port: four",
}


@pytest.mark.parametrize("name,text,accepted", [(k, v, True) for k, v in ACCEPTED.items()]
                         + [(k, v, False) for k, v in REJECTED.items()])
def test_accepts_and_rejects_like_nats_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                              text: str, accepted: bool) -> None:
    monkeypatch.setenv("EDGED_T_ENV", "4333")
    (tmp_path / "inc.conf").write_text("server_name: inc\n")
    conf = tmp_path / f"{name}.conf"
    conf.write_text(text + "\n")
    r = subprocess.run([nats_server_path(), "-t", "-c", str(conf)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=30)
    assert (r.returncode == 0) is accepted, r.stderr
    try:
        load_options(str(conf))
        edged_accepts = True
    except ConfigError as e:
        edged_accepts = False
        assert str(e).startswith(str(tmp_path)), str(e)  # the message names the file
    assert edged_accepts is accepted


# ------------------------------------------------------------------------------------------------ fuzzing


@settings(max_examples=300)
@given(st.lists(st.sampled_from(list("ab: =\n{}[](),;\"'#/\\$1k.-") + ["include ", "true", "$a", "\n)\n"]),
                max_size=40).map("".join))
def test_random_input_only_raises_config_error(text: str) -> None:
    try:
        parse(text)
    except ConfigError as e:
        assert e.pos is not None and e.pos.file == "<string>"


_KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(lambda k: k != "include")
_STRINGS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_SCALAR = st.one_of(st.integers(-(2**63), 2**63 - 1), st.booleans(), _STRINGS)


def _render(v: Any, sep: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        esc = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        return '"' + esc.replace("\r", "\\r") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_render(x, sep) for x in v) + "]"
    return "{\n" + "\n".join(f"{k}{sep}{_render(x, sep)}" for k, x in v.items()) + "\n}"


_VALUES = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(_KEYS, inner, max_size=4)), max_leaves=12)


@settings(max_examples=300)
@given(st.dictionaries(_KEYS, _VALUES, max_size=5), st.sampled_from([": ", " = ", " "]))
def test_rendered_documents_parse_back_to_the_same_values(doc: dict[str, Any], sep: str) -> None:
    text = "\n".join(f"{k}{sep}{_render(v, sep)}" for k, v in doc.items())
    assert parse(text) == doc
