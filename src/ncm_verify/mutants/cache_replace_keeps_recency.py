"""Planted bug: storing under a held key keeps the entry's old place in the recency order (a write is no use)."""

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.ncm import PrefixCache as _ReferenceCache
from ncm_verify.reference.ncm.cache import entry_nbytes


class PrefixCache(_ReferenceCache):
    def _discard(self, encoded: bytes) -> None:
        held = self._entries.get(encoded)  # left in place: the store that follows overwrites it where it is
        if held is not None:
            self._nbytes -= entry_nbytes(held[1])
