"""A correct prefix cache in plain Python, the model the stateful cache properties compare an implementation with
(C15's toy cache, and the source NCM's concept cache). Keys are any hashable slot; payloads anything with
``nbytes``."""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["LRUModel"]


class LRUModel:
    """A correct byte-bounded LRU cache in plain Python: the behaviour the implementation must show.

    An entry larger than the whole budget is not stored and changes nothing; storing
    under a held key replaces its payload and makes it the most recently used; a hit
    makes it the most recently used; the least recently used go first.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.entries: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self.hits = self.misses = self.evictions = 0

    @property
    def nbytes(self) -> int:
        return sum(payload.nbytes for payload in self.entries.values())

    def store(self, slot, payload) -> None:
        if payload.nbytes > self.max_bytes:
            return
        self.entries.pop(slot, None)
        self.entries[slot] = payload
        while self.nbytes > self.max_bytes:
            self.entries.popitem(last=False)
            self.evictions += 1

    def lookup(self, slot) -> Any:
        payload = self.entries.get(slot)
        if payload is None:
            self.misses += 1
            return None
        self.entries.move_to_end(slot)
        self.hits += 1
        return payload
