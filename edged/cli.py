"""`edged` command line: `run` (the default) with nats-server's flags, `check`, `--version`, `--signal`.

Flags override the config file, as in nats-server, so scripts written for nats-server start edged
unchanged.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from edged import SERVER_VERSION, __version__
from edged.conf import ConfigError
from edged.options import Options, TLSConfig

# nats-server's --signal commands (server/signal.go): stop is SIGKILL, quit SIGINT, term SIGTERM
SIGNALS = {"stop": signal.SIGKILL, "quit": signal.SIGINT, "term": signal.SIGTERM, "reopen": signal.SIGUSR1,
           "reload": signal.SIGHUP, "ldm": signal.SIGUSR2}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="edged", add_help=False,
                                description="edged: a NATS-compatible edge gateway (nats-server flags accepted)")
    a = p.add_argument
    a("-h", "--help", action="help", help="show this help and exit")
    a("-v", "--version", action="store_true", help="print the version and exit")
    a("-c", "--config", help="configuration file (nats-server syntax)")
    a("-t", dest="test_config", action="store_true", help="test the configuration and exit (as `edged check`)")
    a("-a", "--addr", "--net", dest="host", help="client listen address")
    a("-p", "--port", type=int, help="client port (default 4222)")
    a("-n", "--name", "--server_name", dest="server_name", help="server name")
    a("-m", "--http_port", type=int, help="monitoring HTTP port")
    a("--client_advertise", help="client URL to advertise")
    a("-P", "--pid", dest="pid_file", help="file to write the process id to")
    a("-l", "--log", dest="log_file", help="log file")
    a("-T", "--logtime", dest="logtime", type=_bool, help="timestamps in log lines (default true)")
    a("-D", "--debug", action="store_true", default=None, help="debug logging")
    a("-V", "--trace", action="store_true", default=None, help="protocol tracing")
    a("-DV", dest="debug_trace", action="store_true", help="debug and trace")
    a("-DVV", dest="debug_trace_verbose", action="store_true", help="debug and verbose trace")
    a("--user", help="user required for connections")
    a("--pass", dest="password", help="password required for connections")
    a("--auth", help="authorization token required for connections")
    a("--no_auth_user", help="user for connections that present no credentials")
    a("-js", "--jetstream", action="store_true", default=None, help="enable JetStream")
    a("-sd", "--store_dir", help="JetStream store directory")
    a("--tls", action="store_true", default=None, help="enable TLS on the client port")
    a("--tlscert", help="server certificate file")
    a("--tlskey", help="server private key file")
    a("--tlsverify", action="store_true", default=None, help="require and verify client certificates")
    a("--tlscacert", help="CA certificate to verify client certificates")
    a("--max_payload", type=int, help=argparse.SUPPRESS)
    a("-sl", "--signal", help="send a signal to a running edged: stop|quit|term|reopen|reload|ldm[=PID|PIDFILE]")
    return p


def _bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {s!r}")


def build_options(ns: argparse.Namespace) -> Options:
    """The config file (if any), then the flags on top of it."""
    if ns.config:
        from edged.config import load_options

        opts = load_options(ns.config)
    else:
        opts = Options()
    flags: dict[str, Any] = {"host": ns.host, "port": ns.port, "server_name": ns.server_name,
                             "http_port": ns.http_port, "client_advertise": ns.client_advertise,
                             "pid_file": ns.pid_file, "log_file": ns.log_file, "logtime": ns.logtime,
                             "no_auth_user": ns.no_auth_user, "max_payload": ns.max_payload}
    for k, v in flags.items():
        if v is not None:
            setattr(opts, k, v)
    if ns.debug or ns.debug_trace or ns.debug_trace_verbose:
        opts.debug = True
    if ns.trace or ns.debug_trace or ns.debug_trace_verbose:
        opts.trace = True
    if ns.user is not None:
        opts.username = ns.user
    if ns.password is not None:
        opts.password = ns.password
    if ns.auth is not None:
        opts.authorization = ns.auth
    if ns.jetstream:
        opts.jetstream.enabled = True
    if ns.store_dir is not None:
        opts.jetstream.store_dir = ns.store_dir
    if ns.tls or ns.tlscert or ns.tlskey or ns.tlsverify or ns.tlscacert:
        t = opts.tls or TLSConfig()
        t.cert_file = ns.tlscert or t.cert_file
        t.key_file = ns.tlskey or t.key_file
        t.ca_file = ns.tlscacert or t.ca_file
        if ns.tlsverify:
            t.verify = True
        opts.tls = t
    return opts


def validate(opts: Options) -> None:
    """Checks that need more than the syntax: auth set-up (keys, JWTs, no_auth_user) and TLS files."""
    from edged.auth import Authenticator

    Authenticator(opts)
    if opts.tls is not None:
        from edged.tlsconf import server_ssl_context

        server_ssl_context(opts.tls)


def send_signal(spec: str, pid_file: str | None) -> int:
    cmd, _, target = spec.partition("=")
    sig = SIGNALS.get(cmd.lower())
    if sig is None:
        print(f"edged: unknown signal {cmd!r} (one of {', '.join(SIGNALS)})", file=sys.stderr)
        return 1
    target = target or pid_file or ""
    if not target:
        print("edged: --signal needs a pid: --signal reload=PID, or a pid file with -P", file=sys.stderr)
        return 1
    if not target.isdigit():
        try:
            with open(target) as f:
                target = f.read().strip()
        except OSError as e:
            print(f"edged: cannot read pid file {target!r}: {e.strerror}", file=sys.stderr)
            return 1
    try:
        os.kill(int(target), sig)
    except (ValueError, ProcessLookupError, PermissionError) as e:
        print(f"edged: cannot signal process {target!r}: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = "run"
    if args and args[0] in ("run", "check"):
        command = args.pop(0)
    ns = _parser().parse_args(args)
    if ns.version:
        print(f"edged {__version__} (nats-server {SERVER_VERSION} compatible)")
        return 0
    if ns.signal:
        return send_signal(ns.signal, ns.pid_file)
    if ns.test_config:
        command = "check"
    if command == "check" and not ns.config:
        print("edged check: a configuration file is required (-c FILE)", file=sys.stderr)
        return 1
    try:
        opts = build_options(ns)
        validate(opts)
    except ConfigError as e:
        print(f"edged: configuration error: {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        where = f"{ns.config}: " if ns.config else ""
        print(f"edged: configuration error: {where}{e}", file=sys.stderr)
        return 1
    if command == "check":
        for w in opts.warnings:
            print(f"warning: {w.where}: {w.message}", file=sys.stderr)
        print(f"edged: configuration file {ns.config} is valid")
        return 0
    from edged.server import serve

    return serve(opts)


if __name__ == "__main__":
    raise SystemExit(main())
