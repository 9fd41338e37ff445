"""Per-user publish/subscribe permissions with nats-server's rules.

- publish: a subject must match an `allow` entry (when there are any) and no `deny` entry.
- subscribe: the subscription must lie inside an `allow` entry (entries may name a queue: `"foo.> q"`),
  and must not lie inside a `deny` entry. A wildcard subscription that merely overlaps a deny entry
  is accepted, and messages on denied subjects are not delivered to it.
- allow_responses: a client may publish to the reply subject of a message delivered to it, up to
  `max_msgs` times within `expires`; without explicit publish permissions that is all it may publish.
"""

from __future__ import annotations

import time

from edged.routing.subjects import subject_is_subset, subject_matches, subjects_overlap
from edged.settings.options import Permissions

_CACHE_MAX = 4096


def _split_queue(entry: str) -> tuple[str, str | None]:
    parts = entry.split()
    if len(parts) >= 2:
        return parts[0], parts[1]
    return entry.strip(), None


class PermissionChecker:
    __slots__ = ("pub_allow", "pub_deny", "sub_allow", "sub_deny", "resp_max", "resp_expires", "replies",
                 "_pub_cache", "_deny_deliver_cache", "has_sub_deny")

    def __init__(self, perms: Permissions) -> None:
        pub, sub, resp = perms.publish, perms.subscribe, perms.allow_responses
        self.pub_allow: list[str] | None = list(pub.allow) if pub is not None and pub.allow else None
        self.pub_deny: list[str] = list(pub.deny) if pub is not None else []
        if resp is not None and self.pub_allow is None:
            self.pub_allow = []  # responses only: the blanket allow is off, as in nats-server
        self.sub_allow = [_split_queue(e) for e in sub.allow] if sub is not None and sub.allow else None
        self.sub_deny = [_split_queue(e) for e in sub.deny] if sub is not None else []
        self.has_sub_deny = bool(self.sub_deny)
        self.resp_max = resp.max_msgs if resp is not None else 0
        self.resp_expires = resp.expires if resp is not None else 0.0
        self.replies: dict[str, list[float]] | None = {} if resp is not None else None
        self._pub_cache: dict[str, bool] = {}
        self._deny_deliver_cache: dict[str, bool] = {}

    # ------------------------------------------------------------------ publish

    def _pub_static(self, subject: str) -> bool:
        r = self._pub_cache.get(subject)
        if r is None:
            allowed = self.pub_allow is None or any(subject_matches(p, subject) for p in self.pub_allow)
            if allowed and self.pub_deny:
                allowed = not any(subject_matches(p, subject) for p in self.pub_deny)
            if len(self._pub_cache) >= _CACHE_MAX:
                self._pub_cache.clear()
            self._pub_cache[subject] = r = allowed
        return r

    def publish_allowed_outright(self, subject: str) -> bool:
        """Allowed by the static lists alone: then `can_publish` is True with no reply allowance used, so a
        run of messages on this subject can be checked once."""
        return self._pub_static(subject)

    def can_publish(self, subject: str) -> bool:
        if self._pub_static(subject):
            return True
        replies = self.replies
        if replies:
            entry = replies.get(subject)
            if entry is not None:
                count, deadline = entry
                now = time.monotonic()
                if deadline and now > deadline:
                    del replies[subject]
                    return False
                count -= 1
                if self.resp_max > 0 and count <= 0:
                    del replies[subject]
                else:
                    entry[0] = count
                return True
        return False

    def note_reply(self, reply: str) -> None:
        """A message with this reply subject was delivered: allow responses to it."""
        replies = self.replies
        if replies is None:
            return
        if len(replies) >= _CACHE_MAX:
            now = time.monotonic()
            for k in [k for k, (_, d) in replies.items() if d and now > d]:
                del replies[k]
            if len(replies) >= _CACHE_MAX:
                replies.pop(next(iter(replies)))
        deadline = time.monotonic() + self.resp_expires if self.resp_expires > 0 else 0.0
        replies[reply] = [float(self.resp_max if self.resp_max > 0 else 1), deadline]

    # ------------------------------------------------------------------ subscribe

    def can_subscribe(self, subject: str, queue: str | None = None) -> bool:
        if self.sub_allow is not None:
            ok = False
            for pat, q in self.sub_allow:
                if subject_is_subset(subject, pat) and (q is None or (queue is not None and subject_matches(q, queue))):
                    ok = True
                    break
            if not ok:
                return False
        for pat, q in self.sub_deny:
            if subject_is_subset(subject, pat) and (q is None or (queue is not None and subject_matches(q, queue))):
                return False
        return True

    def deny_delivery(self, subject: str) -> bool:
        """True for a message on a subject denied to subscribe (reaching a wider wildcard subscription)."""
        if not self.has_sub_deny:
            return False
        r = self._deny_deliver_cache.get(subject)
        if r is None:
            r = any(q is None and subject_matches(p, subject) for p, q in self.sub_deny)
            if len(self._deny_deliver_cache) >= _CACHE_MAX:
                self._deny_deliver_cache.clear()
            self._deny_deliver_cache[subject] = r
        return r

    def overlaps_sub_deny(self, subject: str) -> bool:
        return any(subjects_overlap(p, subject) for p, _ in self.sub_deny)
