"""Planted bug: a hit does not refresh recency, so eviction is first-in-first-out, not least recently used."""

from ncm_verify.ncm import PrefixCache as _ReferenceCache
from ncm_verify.reference import *  # noqa: F401,F403


class PrefixCache(_ReferenceCache):
    def _touch(self, encoded: bytes) -> None:
        pass
