"""Board health telemetry: a service on the server that samples the board (hw/board.py) and publishes it.

Each sample goes out as JSON on a subject (`$EDGED.health.<server_name>` unless configured), is put in a
KV bucket (`edged_health`, key = the server name) when JetStream is on, and is shown in /varz (the
`edged_hw` block) and /metrics. Settings: `edged { hw { ... } }` (see `HwSettings`); `EDGED_HW_ROOT`
overrides the root, so a fake sysfs tree stands in for a board.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edged.goformat import rfc3339
from edged.log import log
from edged.settings.config import parse_duration
from hw.board import Board, Sample
from hw.devices import Led, Watchdog

if TYPE_CHECKING:
    from edged.server import Server

ROOT_ENV = "EDGED_HW_ROOT"
DEFAULT_SUBJECT = "$EDGED.health.{server_name}"
DEFAULT_BUCKET = "edged_health"
API_TIMEOUT_S = 5.0
_KV_KEY_BAD = re.compile(r"[^-/_=.a-zA-Z0-9]")


@dataclass
class HwSettings:
    """`edged { hw { enabled, root, interval, subject, kv_bucket, account, led, watchdog, watchdog_interval } }`."""

    enabled: bool = False  # on when the config has an `edged { hw { } }` block
    root: str = "/"
    interval: float = 30.0
    subject: str = DEFAULT_SUBJECT
    kv_bucket: str = DEFAULT_BUCKET  # "" for none
    account: str = ""
    led: str = ""  # an LED name under /sys/class/leds (e.g. ACT); "" = leave the LEDs alone
    watchdog: str = ""  # a watchdog device (e.g. /dev/watchdog); "" = none
    watchdog_interval: float = 5.0

    @classmethod
    def from_block(cls, edged_block: dict[str, Any], env: dict[str, str] | None = None) -> HwSettings:
        s = cls()
        block = edged_block.get("hw")
        if block is None:
            block = {}
        elif not isinstance(block, dict):
            raise ValueError("edged { hw }: expected a block { }")
        else:
            s.enabled = True
        for k, v in block.items():
            lk = k.lower()
            if lk == "enabled":
                if not isinstance(v, bool):
                    raise ValueError("edged { hw { enabled } } must be true or false")
                s.enabled = v
            elif lk in ("interval", "watchdog_interval"):
                secs = parse_duration(v) if isinstance(v, str) else float(v)
                if secs <= 0:
                    raise ValueError(f"edged {{ hw {{ {lk} }} }} must be more than 0")
                setattr(s, lk, secs)
            elif lk in ("root", "subject", "kv_bucket", "account", "led", "watchdog"):
                if lk == "led" and v is False:
                    v = ""
                if not isinstance(v, str):
                    raise ValueError(f"edged {{ hw {{ {lk} }} }} must be a string")
                setattr(s, lk, v)
            else:
                raise ValueError(f"edged {{ hw }}: unknown setting {k!r}")
        if s.kv_bucket and not re.fullmatch(r"[a-zA-Z0-9_-]+", s.kv_bucket):
            raise ValueError(f"edged {{ hw {{ kv_bucket }} }}: {s.kv_bucket!r} is not a valid bucket name")
        root = (env if env is not None else os.environ).get(ROOT_ENV)
        if root:
            s.root = root
        return s


def kv_key(name: str) -> str:
    """A KV key for a server name (KV keys allow letters, digits and -/_=.)."""
    return _KV_KEY_BAD.sub("_", name).strip(".") or "edged"


class HealthService:
    """Registered from the composition root (edged/app.py); start/stop with the server."""

    def __init__(self, server: Server, settings: HwSettings) -> None:
        self.server = server
        self.settings = settings
        self.board = Board(settings.root)
        self.subject = settings.subject.replace("{server_name}", server.server_name)
        self.key = kv_key(server.server_name)
        self.last: Sample | None = None
        self.last_at = 0.0
        self.published = 0
        self.kv_ready = False
        self.kv_error = ""
        self.led = Led(settings.root, settings.led) if settings.led else None
        self.watchdog = Watchdog(settings.watchdog) if settings.watchdog else None
        self._tasks: list[asyncio.Task[None]] = []
        server.varz_blocks["edged_hw"] = self.varz
        server.metric_blocks.append(self.metrics)

    @property
    def account(self) -> Any:
        return self.server.lookup_account(self.settings.account or "$G")

    def disk_path(self) -> str:
        js = self.server.jetstream
        return js.store_dir if js is not None and os.path.isdir(js.store_dir) else (
            self.server.opts.jetstream.store_dir or "/")

    async def start(self) -> None:
        if self.led is not None:
            self.led.start()
        if self.watchdog is not None:
            self.watchdog.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._sampler()))
        if self.led is not None or self.watchdog is not None:
            self._tasks.append(loop.create_task(self._devices()))
        log.info("Board health: %s every %gs on %s%s", self.board.model() or "no board facts (not a Pi)",
                 self.settings.interval, self.subject,
                 f", KV bucket {self.settings.kv_bucket}" if self.settings.kv_bucket else "")

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        if self.led is not None:
            self.led.stop()
        if self.watchdog is not None:
            self.watchdog.stop()

    # ------------------------------------------------------------------ sampling and publishing

    def sample(self) -> Sample:
        self.last = self.board.sample(self.disk_path())
        self.last_at = time.time()
        return self.last

    def document(self, s: Sample) -> dict[str, Any]:
        lm = self.server.leafnodes
        return {"server_name": self.server.server_name, "server_id": self.server.server_id,
                "time": rfc3339(self.last_at), **s.as_dict(),
                "leaf_connected": lm.all_connected() if lm is not None and lm.links else None}

    async def _sampler(self) -> None:
        while True:
            try:
                s = await asyncio.get_running_loop().run_in_executor(None, self.sample)  # vcgencmd may block
                await self.publish(s)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # one bad sample must not stop the telemetry
                log.error("Board health sample failed: %s", e)
            await asyncio.sleep(self.settings.interval)

    async def publish(self, s: Sample) -> None:
        body = json.dumps(self.document(s), separators=(",", ":")).encode()
        ic = self.account.internal
        ic.publish(self.subject, body)
        if self.settings.kv_bucket and self.server.jetstream is not None:
            if not self.kv_ready:
                await self._ensure_bucket()
            if self.kv_ready:
                ic.publish(f"$KV.{self.settings.kv_bucket}.{self.key}", body)
        self.published += 1
        self.server.flush_now()

    async def _ensure_bucket(self) -> None:
        """Create the KV bucket's stream through the JetStream API, as any client would."""
        b = self.settings.kv_bucket
        cfg = {"name": f"KV_{b}", "subjects": [f"$KV.{b}.>"], "retention": "limits", "max_msgs_per_subject": 1,
               "discard": "new", "storage": "file", "num_replicas": 1, "allow_rollup_hdrs": True,
               "deny_delete": True, "allow_direct": True, "duplicate_window": 120_000_000_000,
               "max_msgs": -1, "max_bytes": -1, "max_age": 0, "max_msg_size": -1}
        answer = await self._request(f"$JS.API.STREAM.CREATE.KV_{b}", json.dumps(cfg).encode())
        err = (answer or {}).get("error")
        if answer is None:
            self.kv_error = "no answer from the JetStream API"
        elif err and err.get("err_code") != 10058:  # 10058: the stream exists with another config: use it
            self.kv_error = str(err.get("description") or err)
        else:
            self.kv_ready, self.kv_error = True, ""
        if self.kv_error:
            log.warning("Board health KV bucket %s not available: %s", b, self.kv_error)

    async def _request(self, subject: str, payload: bytes) -> dict[str, Any] | None:
        ic = self.account.internal
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        inbox = f"_INBOX.edged_hw_{os.urandom(6).hex()}"

        def on_reply(_sub: Any, _subject: str, _reply: str, _hdr: bytes | None, data: bytes) -> None:
            if not fut.done():
                fut.set_result(data)

        sub = ic.subscribe(inbox + ".*", on_reply)
        try:
            ic.publish(subject, payload, reply=inbox + ".1")
            self.server.flush_now()
            data = await asyncio.wait_for(fut, API_TIMEOUT_S)
            doc = json.loads(data)
            return doc if isinstance(doc, dict) else None
        except (TimeoutError, ValueError):
            return None
        finally:
            ic.unsubscribe(sub)

    # ------------------------------------------------------------------ LED and watchdog

    def healthy(self) -> bool:
        """What the hardware watchdog is fed for: the loop runs (this is called from it) and edged is not
        stopping; a JetStream store that no longer commits is reported by JetStream's own health."""
        if self.server.shutting_down:
            return False
        js = self.server.jetstream
        if js is not None:
            ok, _ = js.healthz()
            return ok
        return True

    async def _devices(self) -> None:
        while True:
            lm = self.server.leafnodes
            if self.led is not None:
                self.led.show(lm is not None and bool(lm.links) and lm.all_connected())
            if self.watchdog is not None and self.healthy():
                self.watchdog.feed()
            await asyncio.sleep(min(self.settings.watchdog_interval, 1.0) if self.led is not None
                                else self.settings.watchdog_interval)

    # ------------------------------------------------------------------ monitoring

    def varz(self) -> dict[str, Any]:
        s = self.last
        d: dict[str, Any] = {"subject": self.subject, "kv_bucket": self.settings.kv_bucket if self.kv_ready else "",
                             "root": self.settings.root, "sampled": rfc3339(self.last_at) if self.last_at else "",
                             "published": self.published}
        if self.kv_error:
            d["kv_error"] = self.kv_error
        d |= s.as_dict() if s is not None else {}
        if self.led is not None:
            d["led"] = {"name": self.settings.led, "on": self.led.state, "error": self.led.error}
        if self.watchdog is not None:
            d["watchdog"] = {"device": self.watchdog.path, "open": self.watchdog.fd is not None,
                             "feeds": self.watchdog.feeds, "error": self.watchdog.error}
        return d

    def metrics(self) -> list[tuple[str, str, str, list[tuple[dict[str, str], float]]]]:
        """Prometheus families; a fact the board does not have is left out (not a 0 that looks real)."""
        s = self.last
        if s is None:
            return []
        out: list[tuple[str, str, str, list[tuple[dict[str, str], float]]]] = []
        if s.cpu_temp_c is not None:
            out.append(("edged_hw_cpu_temperature_celsius", "gauge", "CPU temperature (thermal_zone0).",
                        [({}, s.cpu_temp_c)]))
        if s.throttled is not None:
            out.append(("edged_hw_throttled", "gauge",
                        "Firmware get_throttled flags: 1 when set (now, or occurred since boot).",
                        [({"flag": k}, 1 if v else 0) for k, v in s.throttled.flags().items()]))
        if s.disk_total is not None and s.disk_free is not None:
            out.append(("edged_hw_disk_total_bytes", "gauge", "Size of the store's filesystem.",
                        [({"path": s.disk_path}, s.disk_total)]))
            out.append(("edged_hw_disk_free_bytes", "gauge", "Free space on the store's filesystem.",
                        [({"path": s.disk_path}, s.disk_free)]))
        return out


def register(server: Server) -> None:
    """The composition root's hook: the service, unless `edged { hw { enabled: false } }`."""
    settings = HwSettings.from_block(server.opts.edged)
    if settings.enabled:
        server.services.append(HealthService(server, settings))
