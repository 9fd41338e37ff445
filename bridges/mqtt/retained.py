"""Retained messages of one account: an index in memory (subject -> the last retained message), and the
`$MQTT_rmsgs` stream (one record per subject, nats-server's header layout) that it is loaded from at
start and written through, so a retained message survives a restart and a kill -9."""

from __future__ import annotations

from bridges.mqtt.jsapi import JSApi
from bridges.mqtt.natsmsg import Retained, decode_retained, encode_retained
from bridges.mqtt.session import RMSGS_PREFIX, RMSGS_STREAM
from bridges.mqtt.topics import ignore_for_reserved, is_reserved_subscription
from edged.routing.subjects import subject_matches


class RetainedStore:
    def __init__(self, api: JSApi) -> None:
        self.api = api
        self.msgs: dict[str, Retained] = {}

    async def load(self) -> None:
        for subject in await self.api.subjects(RMSGS_STREAM):
            m = await self.api.last_msg(RMSGS_STREAM, subject)
            if m is None:
                continue
            key = subject[len(RMSGS_PREFIX):]
            r = decode_retained(key, m.header, m.payload, m.seq)
            if r is not None:
                self.msgs[key] = r

    async def put(self, r: Retained) -> None:
        """Set (or, with an empty payload, clear) the retained message of `r.subject`: the index at once, so
        a SUBSCRIBE right after sees it, then the stream."""
        if r.payload:
            self.msgs[r.subject] = r
        else:
            self.msgs.pop(r.subject, None)
        hdr, payload = encode_retained(r)
        seq = await self.api.store(RMSGS_PREFIX + r.subject, payload, hdr)
        if r.payload and self.msgs.get(r.subject) is r:
            r.seq = seq

    def matching(self, filter_subject: str) -> list[Retained]:
        reserved = is_reserved_subscription(filter_subject)
        return [r for s, r in self.msgs.items()
                if subject_matches(filter_subject, s) and not ignore_for_reserved(reserved, s)]
