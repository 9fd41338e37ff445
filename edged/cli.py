"""`edged` command line: `run` (the default) with nats-server's flags, `check`, `--version`, `--signal`.

Flags are nats-server's (server/opts.go ConfigureOptions) and are parsed the way Go's flag package
parses them, so scripts written for nats-server start edged unchanged: `-port 4222`, `--port=4222`,
`-js`, `-sd DIR`, `-DV`, `-tls=false` all work. Flags override the config file, also after a reload
(SIGHUP), as nats-server's FlagSnapshot does. nats-server flags for features edged lacks (cluster,
routes, HTTPS monitoring, ...) are accepted and reported as warnings, like unsupported config keys.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from edged import API_LEVEL, SERVER_VERSION, __version__
from edged.settings.conf import ConfigError
from edged.settings.options import ConfigWarning, Options, TLSConfig

# nats-server's --signal commands (server/signal.go): stop is SIGKILL, quit SIGINT, term SIGTERM
SIGNALS = {"stop": signal.SIGKILL, "quit": signal.SIGINT, "term": signal.SIGTERM, "reopen": signal.SIGUSR1,
           "reload": signal.SIGHUP, "ldm": signal.SIGUSR2}

COMMANDS = ("run", "check", "status", "provision", "fleet", "version", "help")

# each command's usage line and description (`edged COMMAND -h`, `edged help COMMAND`); "" is edged's own
_COMMAND_HELP = {
    "": ("edged [command] [flags]   (nats-server's flags; without a command, edged runs the server)",
         "edged: a NATS-compatible edge gateway. Flags override the config file.\n\n"
         "commands:\n"
         "  run        run the server (the default: `edged -c FILE` is `edged run -c FILE`)\n"
         "  check      check a configuration file and exit (as nats-server -t)\n"
         "  status     show a running edged's links and backlogs (mirrors, sources, hub consumers)\n"
         "  provision  install a provisioning bundle (creds, hub URLs, CA) and apply it without a restart\n"
         "  fleet      the operator's side: signing keys, device users and their bundles\n"
         "  version    print the version and exit\n"
         "  help       show this help, or a command's: edged help COMMAND (or edged COMMAND -h)"),
    "run": ("edged run [flags]   (also: edged [flags])",
            "Run the server: read the configuration file (-c), put the flags on top of it, listen for "
            "clients. Logs go to stderr (journald under systemd) one line per event, as nats-server's; a "
            "fatal start error is one [FTL] line and exit status 1. --signal sends a signal to a running "
            "edged instead."),
    "check": ("edged check -c FILE [flags]   (also: edged -t -c FILE)",
              "Check a configuration file, and the flags on top of it, as `nats-server -t -c FILE` does, "
              "then exit: `configuration file FILE is valid` and status 0, or every error as "
              "file:line:col and status 1. Settings edged reads but does not act on are listed as "
              "warnings."),
    "status": ("edged status [-s URL | -m PORT] [--json]",
               "Show a running edged's backlog, read from its monitoring port: each leafnode remote "
               "(connected, since when, RTT, last error), each mirror and source (messages and bytes behind, "
               "age of the oldest message not yet taken, last contact, rate, estimated time to drain) and each "
               "consumer a hub created on edged's streams (what the hub still has to take). --json prints the "
               "same figures for scripts. Exit status 1, with one line, when the port does not answer."),
    "provision": ("edged provision BUNDLE [-c CONFIG] [-P PIDFILE] [-m PORT] [--timeout S] [--no-probe]", ""),
    "fleet": ("edged fleet {signing-key,account,device} ...", ""),
    "version": ("edged version", "Print the nats-server version edged answers as, then edged's own."),
    "help": ("edged help [command]", "Show edged's help, or one command's."),
}

# nats-server flags edged accepts but does not act on: dest -> why (reported as a warning)
_UNSUPPORTED_FLAGS = {
    "https_port": "monitoring over HTTPS is not supported; use -m",
    "cluster": "clustering is not supported: edged is a single server",
    "cluster_advertise": "clustering is not supported",
    "no_advertise": "clustering is not supported",
    "connect_retries": "clustering is not supported",
    "cluster_name": "clustering is not supported",
    "routes": "clustering (routes) is not supported",
    "profile": "the Go profiler has no meaning for edged",
    "remote_syslog": "remote syslog is not supported",
    "syslog": "syslog is not supported; logs go to stderr (journald under systemd)",
    "log_size_limit": "log rotation by size is not supported; use logrotate and --signal reopen",
    "logtime_utc": "log timestamps are always local time",
    "max_traced_msg_len": "max_traced_msg_len is ignored",
    "ports_file_dir": "ports files are not written by edged",
}

TLS_HELP = """TLS options (as nats-server):
    --tls                      Enable TLS, do not verify clients (default: false)
    --tlscert <file>           Server certificate file
    --tlskey <file>            Private key for server certificate
    --tlsverify                Enable TLS, verify client certificates
    --tlscacert <file>         Client certificate CA for verification
Any of them replaces the config file's tls block; --tls=false turns TLS off."""


class UsageError(Exception):
    """A bad command line (nats-server exits 1 for it, so edged does too)."""


class FlagError(ValueError):
    """A flag value edged cannot use (e.g. --tls without a certificate)."""


class _Help(argparse.HelpFormatter):
    """Boolean flags take an optional `=true|false` (Go's flag package); show them as plain switches.
    A description's paragraphs are filled one by one, and a list (lines indented) is kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for para in text.split("\n\n"):
            lines = para.splitlines()
            if len(lines) > 1 and all(ln.startswith("  ") for ln in lines[1:]):
                out.append("\n".join(indent + ln for ln in lines))
            else:
                out.append(super()._fill_text(para, width, indent))
        return "\n\n".join(out)

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if action.nargs == "?" and action.const is True:
            return ""
        return super()._format_args(action, default_metavar)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if action.nargs == "?" and action.const is True:
            return ", ".join(action.option_strings)
        return super()._format_action_invocation(action)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _gobool(s: str) -> bool:
    """Go's strconv.ParseBool, used by its flag package for `-flag=value`."""
    if s in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if s in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {s!r}")


def _parser(command: str = "") -> argparse.ArgumentParser:
    """The flags, with `command`'s usage and description; `version` and `help` take no flags."""
    usage, description = _COMMAND_HELP[command]
    if command == "status":
        from edged.appliance.status import parser

        return parser(usage, description, _Help, _Parser)
    if command == "provision":
        from edged.appliance import provision

        return provision.parser(usage, provision.DESCRIPTION, _Help, _Parser)
    if command == "fleet":
        from edged.appliance import fleet

        return fleet.parser(usage, fleet.DESCRIPTION, _Help, _Parser)
    p = _Parser(prog=f"edged {command}".strip(), add_help=False, allow_abbrev=False, formatter_class=_Help,
                usage=usage, description=description)
    if command in ("version", "help"):
        p.add_argument("-h", "--help", action="help", help="show this help and exit")
        if command == "help":
            p.add_argument("topic", nargs="?", choices=COMMANDS, metavar="command", help="one of: " + ", ".join(COMMANDS))
        return p

    def flag(*names: str, boolean: bool = False, **kw: Any) -> None:
        """Register `names`, plus the other dash form of each (Go accepts -name and --name alike)."""
        if boolean:
            kw.update(nargs="?", const=True, type=_gobool, default=None)
        p.add_argument(*names, **kw)
        alts = [n[1:] if n.startswith("--") else "-" + n for n in names if len(n.lstrip("-")) > 1]
        if alts:
            hidden = dict(kw, help=argparse.SUPPRESS)
            hidden.setdefault("dest", names[-1].lstrip("-").replace("-", "_"))
            p.add_argument(*alts, **hidden)

    flag("-h", "--help", action="help", help="show this help and exit")
    flag("--help_tls", boolean=True, help="show the TLS flags and exit")
    flag("-v", "--version", boolean=True, help="print the version and exit")
    flag("-c", "--config", dest="config", help="configuration file (nats-server syntax)")
    flag("-t", dest="test_config", boolean=True, help="check the configuration file and exit (as `edged check`)")
    # server
    flag("-a", "--addr", "--net", dest="host", help="client listen address (default 0.0.0.0)")
    flag("-p", "--port", dest="port", type=int, help="client port (default 4222, -1 for random)")
    flag("-n", "--name", "--server_name", dest="server_name", help="server name (default: the server id)")
    flag("--client_advertise", dest="client_advertise", help="client URL to advertise")
    flag("-m", "--http_port", dest="http_port", type=int, help="monitoring HTTP port")
    flag("-ms", "--https_port", dest="https_port", type=int, help=argparse.SUPPRESS)
    flag("-P", "--pid", dest="pid_file", help="file to write the process id to")
    flag("--ports_file_dir", dest="ports_file_dir", help=argparse.SUPPRESS)
    flag("-sl", "--signal", dest="signal",
         help="send a signal to a running edged: stop|quit|term|reopen|reload|ldm[=PID|PIDFILE] (or with -P)")
    # logging
    flag("-l", "--log", dest="log_file", help="log file")
    flag("-T", "--logtime", dest="logtime", boolean=True, help="timestamp log lines (default true)")
    flag("--logtime_utc", dest="logtime_utc", boolean=True, help=argparse.SUPPRESS)
    flag("-s", "--syslog", dest="syslog", boolean=True, help=argparse.SUPPRESS)
    flag("-r", "--remote_syslog", dest="remote_syslog", help=argparse.SUPPRESS)
    flag("--log_size_limit", dest="log_size_limit", type=int, help=argparse.SUPPRESS)
    flag("--max_traced_msg_len", dest="max_traced_msg_len", type=int, help=argparse.SUPPRESS)
    flag("-D", "--debug", dest="debug", boolean=True, help="debug logging")
    flag("-V", "--trace", dest="trace", boolean=True, help="protocol tracing")
    flag("-VV", dest="trace_verbose", boolean=True, help="verbose tracing")
    flag("-DV", dest="debug_trace", boolean=True, help="debug and trace")
    flag("-DVV", dest="debug_trace_verbose", boolean=True, help="debug and verbose trace")
    # auth
    flag("--user", dest="user", help="user required for connections")
    flag("--pass", dest="password", help="password required for connections")
    flag("--auth", dest="auth", help="authorization token required for connections")
    # TLS
    flag("--tls", dest="tls", boolean=True, help="enable TLS on the client port")
    flag("--tlscert", dest="tlscert", help="server certificate file")
    flag("--tlskey", dest="tlskey", help="server private key file")
    flag("--tlsverify", dest="tlsverify", boolean=True, help="require and verify client certificates")
    flag("--tlscacert", dest="tlscacert", help="CA certificate to verify client certificates")
    # JetStream
    flag("-js", "--jetstream", dest="jetstream", boolean=True, help="enable JetStream")
    flag("-sd", "--store_dir", dest="store_dir", help="JetStream store directory")
    # clustering and profiling (nats-server flags edged has no use for)
    flag("--cluster", "--cluster_listen", dest="cluster", help=argparse.SUPPRESS)
    flag("--cluster_advertise", dest="cluster_advertise", help=argparse.SUPPRESS)
    flag("--no_advertise", dest="no_advertise", boolean=True, help=argparse.SUPPRESS)
    flag("--connect_retries", dest="connect_retries", type=int, help=argparse.SUPPRESS)
    flag("--cluster_name", dest="cluster_name", help=argparse.SUPPRESS)
    flag("--routes", dest="routes", help=argparse.SUPPRESS)
    flag("--profile", dest="profile", type=int, help=argparse.SUPPRESS)
    return p


def flag_applier(ns: argparse.Namespace) -> Callable[[Options], None]:
    """A function putting the command-line flags on top of options read from a config file."""

    def apply(opts: Options) -> None:
        from edged.settings.config import port_error, valid_port

        for flag_name, port in (("port", ns.port), ("http_port", ns.http_port)):
            if port is not None and not valid_port(port):
                raise FlagError(port_error(flag_name, port))
        plain = {"host": ns.host, "port": ns.port, "http_port": ns.http_port,
                 "client_advertise": ns.client_advertise, "pid_file": ns.pid_file, "log_file": ns.log_file,
                 "logtime": ns.logtime}
        for k, v in plain.items():
            if v is not None:
                setattr(opts, k, v)
        if ns.server_name is not None:
            if " " in ns.server_name:
                raise FlagError("server name can not contain spaces")
            opts.server_name = ns.server_name
        # -D/-V set one level; -DV/-DVV/-VV set both (or unset with =false), as nats-server
        if ns.debug is not None:
            opts.debug = ns.debug
        if ns.trace is not None:
            opts.trace = ns.trace
        if ns.trace_verbose is not None:
            opts.trace = ns.trace_verbose
        for combined in (ns.debug_trace, ns.debug_trace_verbose):
            if combined is not None:
                opts.debug = opts.trace = combined
        if ns.user is not None:
            opts.username = ns.user
        if ns.password is not None:
            opts.password = ns.password
        if ns.auth is not None:
            opts.authorization = ns.auth
        if ns.jetstream is not None:
            opts.jetstream.enabled = ns.jetstream
        if ns.store_dir is not None:
            opts.jetstream.store_dir = ns.store_dir
        _apply_tls_flags(ns, opts)
        for dest, why in _UNSUPPORTED_FLAGS.items():
            v = getattr(ns, dest)
            if v is not None and v is not False:
                opts.warnings.append(ConfigWarning(f"--{dest}", "command line",
                                                   f"--{dest} is not supported by edged and is ignored: {why}"))

    return apply


def _apply_tls_flags(ns: argparse.Namespace, opts: Options) -> None:
    """Any TLS flag replaces the config's tls block (nats-server's overrideTLS); --tls=false removes it."""
    if ns.tls is False:
        opts.tls = None
        return
    if not any(v is not None for v in (ns.tls, ns.tlscert, ns.tlskey, ns.tlsverify, ns.tlscacert)):
        return
    if not ns.tlscert:
        raise FlagError("TLS Server certificate must be present and valid")
    if not ns.tlskey:
        raise FlagError("TLS Server private key must be present and valid")
    t = TLSConfig(cert_file=ns.tlscert, key_file=ns.tlskey, ca_file=ns.tlscacert or "", verify=bool(ns.tlsverify))
    if opts.tls is not None:
        t.timeout = opts.tls.timeout
    opts.tls = t


def build_options(ns: argparse.Namespace) -> Options:
    """The config file (if any), then the flags on top of it."""
    if ns.config:
        from edged.settings.config import load_options

        opts = load_options(ns.config)
    else:
        opts = Options()
    flag_applier(ns)(opts)
    return opts


def validate(opts: Options) -> None:
    """Checks that need more than the syntax: auth set-up (keys, JWTs, no_auth_user) and TLS files."""
    from edged.app import validate as validate_front_doors
    from edged.security.auth import Authenticator

    Authenticator(opts)
    validate_front_doors(opts)
    if opts.tls is not None:
        from edged.security.tlsconf import server_ssl_context

        server_ssl_context(opts.tls)
    # edged's own blocks: `edged { creds { } hw { } doctor { } }` (their errors say which setting); a block
    # not there has nothing to check, so its module is not imported (start-up time)
    if "creds" in opts.edged:
        from edged.leafnode.credsfile import CredsSettings

        CredsSettings.from_block(opts.edged)
    if "hw" in opts.edged:
        from hw.health import HwSettings

        HwSettings.from_block(opts.edged)
    if "doctor" in opts.edged:
        from edged.appliance.doctor import DoctorSettings

        DoctorSettings.from_block(opts.edged)


def _read_pid(target: str) -> str:
    """nats-server's maybeReadPidFile: the file's content if `target` is a readable file, else `target`."""
    try:
        with open(target) as f:
            return f.read().strip()
    except OSError:
        return target.strip()


def send_signal(spec: str, pid_file: str | None, config: str | None = None) -> int:
    """`--signal CMD[=PID|PIDFILE]`; without a pid, the -P pid file, else the config file's pid_file."""
    parts = spec.split("=")
    if len(parts) > 2:
        print(f"edged: invalid signal parameters: {parts[2:]}", file=sys.stderr)
        return 1
    cmd = parts[0].lower()
    sig = SIGNALS.get(cmd)
    if sig is None:
        print(f'edged: unknown signal "{parts[0]}" (one of {", ".join(SIGNALS)})', file=sys.stderr)
        return 1
    target = parts[1] if len(parts) == 2 else pid_file or ""
    if not target and config:
        from edged.settings.config import load_options

        try:
            target = load_options(config).pid_file
        except ConfigError as e:
            print(f"edged: {_one_line(str(e))}", file=sys.stderr)
            return 1
    if not target:
        print("edged: --signal needs a pid: --signal reload=PID|PIDFILE, or a pid file with -P", file=sys.stderr)
        return 1
    pid = _read_pid(target)
    if not pid.isdigit():
        print(f"edged: invalid pid: {pid}", file=sys.stderr)
        return 1
    try:
        os.kill(int(pid), sig)
    except OSError as e:
        print(f'edged: signal "{cmd}" {pid}: {e.strerror}', file=sys.stderr)
        return 1
    return 0


def _one_line(s: str) -> str:
    return " ".join(s.split("\n"))


def _version() -> str:
    """nats-server's own form first (tools that launch a nats-server parse `nats-server: vX.Y.Z`), then
    edged's version and the JetStream API level behind that claim."""
    return f"nats-server: v{SERVER_VERSION}\nedged: v{__version__} (JetStream API level {API_LEVEL})"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args.pop(0) if args and args[0] in COMMANDS else ""
    parser = _parser(command)
    try:
        ns = parser.parse_args(args)
    except UsageError as e:
        print(f"edged: {e} (see edged {command + ' ' if command else ''}-h)", file=sys.stderr)
        return 1
    if command == "help":
        _parser(ns.topic or "").print_help()
        return 0
    if command == "status":
        from edged.appliance.status import run

        return run(ns)
    if command in ("provision", "fleet"):
        from edged.appliance import fleet, provision

        return provision.run(ns) if command == "provision" else fleet.run(ns)
    if command == "version" or ns.version:
        print(_version())
        return 0
    command = command or "run"
    if ns.help_tls:
        print(TLS_HELP)
        return 0
    if ns.signal:
        return send_signal(ns.signal, ns.pid_file, ns.config)
    if ns.test_config:
        command = "check"
    if command == "check" and not ns.config:
        print("edged: must specify [-c, --config] option to check configuration file syntax", file=sys.stderr)
        return 1
    try:
        opts = build_options(ns)
        validate(opts)
    except ConfigError as e:
        for one in e.errors:  # every unknown key of the file, one per line, as nats-server lists them
            print(f"edged: configuration error: {_one_line(str(one))}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        where = f"{ns.config}: " if ns.config and not isinstance(e, FlagError) else ""
        print(f"edged: configuration error: {where}{_one_line(str(e))}", file=sys.stderr)
        return 1
    if command == "check":
        for w in opts.warnings:
            print(f"edged: warning: {w.where}: {w.message}", file=sys.stderr)
        print(f"edged: configuration file {ns.config} is valid")
        return 0
    from edged.app import build
    from edged.server import serve
    from edged.settings.config import set_flag_overrides

    set_flag_overrides(flag_applier(ns))  # a SIGHUP reload re-reads the file, then these flags again
    return serve(opts, build)


if __name__ == "__main__":
    raise SystemExit(main())
