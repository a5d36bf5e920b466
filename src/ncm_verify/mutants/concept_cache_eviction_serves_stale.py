"""Planted bug: an eviction hands the evicted entry's slot to a newcomer of the same prefix length but leaves the
evicted key's index pointing at it, so a lookup of the evicted key is served the newcomer's K/V (counted a hit)."""

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.ncm import PrefixCache as _ReferenceCache


class PrefixCache(_ReferenceCache):
    def __init__(self, max_bytes: int = 64 * 2**20):
        super().__init__(max_bytes)
        self._slots: dict[bytes, bytes] = {}  # evicted key -> the key now in its slot

    def store(self, key, entry) -> None:
        before = {encoded: len(held[0].tokens) for encoded, held in self._entries.items()}
        super().store(key, entry)
        for gone, length in before.items():
            if gone not in self._entries and length == len(key.tokens):
                self._slots[gone] = key.encode()

    def lookup(self, key):
        alias = self._slots.get(key.encode())
        if key.encode() not in self._entries and alias in self._entries:
            self.hits += 1
            self._touch(alias)
            return self._entries[alias][1]
        return super().lookup(key)


def make_concept_cache(max_bytes: int = 64 * 2**20) -> PrefixCache:
    return PrefixCache(max_bytes)
