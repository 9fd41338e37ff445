"""Config files nats-server refuses for an unknown key, one per block level it checks, with the error
line for each (file x.conf). Columns count from 1 on every line; nats-server's lexer counts line 1's
from 0 (conf/lex.go: a column is the offset from the last new line, and line 1 has none), so its
line-1 columns are one less: `nats_line` turns an expected line into what nats-server prints."""

from __future__ import annotations

# (config text, the error line for it, the file named x.conf)
UNKNOWN_KEYS: list[tuple[str, str]] = [
    ("port: 4222\nhtpp_port: 8222\n", 'x.conf:2:1: unknown field "htpp_port"'),
    ("jetstream {\n  store_dri: /tmp/x\n}\n", 'x.conf:2:3: unknown field "store_dri"'),
    ("jetstream { limits { max_ack_pendng: 1 } }\n", 'x.conf:1:22: unknown field "max_ack_pendng"'),
    ("leafnodes { remotse: [] }\n", 'x.conf:1:13: unknown field "remotse"'),
    ("leafnodes { remotes: [ { url: 'nats://127.0.0.1:7422', credz: x } ] }\n",
     'x.conf:1:56: unknown field "credz"'),
    ("leafnodes { remotes: [ { url: 'nats://127.0.0.1:7422', compression: { mod: s2_auto } } ] }\n",
     'x.conf:1:71: unknown field "mod"'),
    ("leafnodes { authorization { usr: a } }\n", 'x.conf:1:29: unknown field "usr"'),
    ("authorization { tokn: x }\n", 'x.conf:1:17: unknown field "tokn"'),
    ("authorization { users: [ { user: a, password: b, perms: {} } ] }\n",
     'x.conf:1:50: unknown field "perms"'),
    ("accounts { A { userz: [] } }\n", 'x.conf:1:16: unknown field "userz"'),
    ("accounts { A { jetstream { max_memry: 1 } } }\n", 'x.conf:1:28: unknown field "max_memry"'),
    ("accounts { A { limits { max_con: 1 } } }\n", 'x.conf:1:25: Unknown field "max_con" parsing account limits'),
    ("accounts { A { exports: [ { stream: a, acounts: [B] } ] }, B {} }\n",
     'x.conf:1:40: unknown field "acounts"'),
    ("accounts { A { exports: [ { stream: a } ] }, B { imports: [ { stream: { account: A, subject: a }, "
     "prefx: p } ] } }\n", 'x.conf:1:99: unknown field "prefx"'),
    ("tls {\n  cert_fil: c\n}\n", 'x.conf:2:3: error parsing tls config, unknown field "cert_fil"'),
    ("cluster { name: C, prot: 6222 }\n", 'x.conf:1:20: unknown field "prot"'),
    ("cluster { name: C, authorization { usr: a } }\n", 'x.conf:1:36: unknown field "usr"'),
    ("cluster { name: C, tls { keyfile: k } }\n", 'x.conf:1:26: error parsing tls config, unknown field "keyfile"'),
    ("gateway { name: G, gatewyas: [] }\n", 'x.conf:1:20: unknown field "gatewyas"'),
    ("gateway { name: G, gateways: [ { name: B, ulr: 'nats://127.0.0.1:7222' } ] }\n",
     'x.conf:1:43: unknown field "ulr"'),
    ("mqtt { prot: 1883 }\n", 'x.conf:1:8: unknown field "prot"'),
    ("mqtt { port: 1883, authorization { usr: a } }\n", 'x.conf:1:36: unknown field "usr"'),
    ("websocket { port: 8080, no_tsl: true }\n", 'x.conf:1:25: unknown field "no_tsl"'),
    ("proxies { trusted: [ { ky: x } ] }\n", 'x.conf:1:24: unknown field "ky"'),
    ("authorization {\n  users: [ { user: a, password: b, permissions: { publsh: x } } ]\n}\n",
     'x.conf:2:51: Unknown field "publsh" parsing permissions'),
    ("authorization {\n  default_permissions: { publish: x, allow_responses: { mx: 1 } }\n}\n",
     'x.conf:2:57: Unknown field "mx" parsing permissions'),
    ("ocsp { mode: auto, uls: [] }\n", "x.conf:1:20: error parsing ocsp config: unsupported field string"),
    ("resolver_tls {\n  cafile: x\n}\n", 'x.conf:2:3: error parsing tls config, unknown field "cafile"'),
]


def nats_line(line: str) -> str:
    """The line as nats-server prints it: on line 1 of a file its column is one less."""
    file, lno, col, rest = line.split(":", 3)
    return f"{file}:{lno}:{int(col) - 1 if lno == '1' else col}:{rest}"


# A file using keys nats-server knows in every block it checks (nats-server -t: valid), most of them
# in blocks edged reads but does not act on: edged must load it (with warnings), not refuse it.
KNOWN_KEYS = """\
server_name: S1
port: -1
http_port: -1
jetstream {
  store_dir: "./js"
  max_mem: 1G
  limits { max_ack_pending: 100, duplicate_window: "1m", batch { max_msgs: 10 } }
}
cluster {
  name: C
  port: -1
  pool_size: 3
  compression: { mode: s2_fast, rtt_thresholds: ["10ms"] }
  authorization { user: r, password: p, timeout: 2 }
  permissions { publish: ">", subscribe: ">" }
  tls { timeout: 2 }
}
gateway {
  name: C
  port: -1
  reject_unknown_cluster: true
  authorization { user: g, password: p }
  gateways: [ { name: H, url: "nats://127.0.0.1:7222" } ]
}
leafnodes {
  port: -1
  authorization { user: l, password: p, account: A, timeout: 2 }
  remotes: [ { url: "nats://127.0.0.1:7422", account: A, compression: { mode: "off" } } ]
}
mqtt {
  port: -1
  ack_wait: "30s"
  max_ack_pending: 100
  js_domain: d
  consumer_inactive_threshold: "1h"
  authorization { user: m, password: p, timeout: 2 }
}
websocket {
  port: -1
  no_tls: true
  compression: true
  handshake_timeout: "2s"
  headers { X-Edge: "yes" }
  authorization { timeout: 2 }
}
accounts {
  A {
    users: [ { user: a, password: p, permissions: { publish: { allow: ">" }, allow_responses: { max: 2 } } } ]
    limits { max_conn: 10, max_subs: 100, max_payload: 1024, max_leafnodes: 2 }
    exports: [ { stream: "a.>", accounts: [B] }, { service: "svc", response_type: stream } ]
    jetstream { max_mem: 1M, max_streams: 10 }
  }
  B {
    users: [ { user: b, password: p } ]
    imports: [ { stream: { account: A, subject: "a.>" }, prefix: p }, { service: { account: A, subject: svc }, to: svc } ]
  }
}
proxies { trusted: [ { key: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4" } ] }
"""
