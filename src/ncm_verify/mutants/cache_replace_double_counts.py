"""Planted bug: storing under a held key drops the old entry but not its bytes, so the budget shrinks."""

from ncm_verify.ncm import PrefixCache as _ReferenceCache
from ncm_verify.reference import *  # noqa: F401,F403


class PrefixCache(_ReferenceCache):
    def _discard(self, encoded: bytes) -> None:
        self._entries.pop(encoded, None)
