"""Planted bug: a hit does not refresh recency, so eviction is first-in-first-out, not least recently used."""

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.ncm import PrefixCache as _ReferenceCache


class PrefixCache(_ReferenceCache):
    def _touch(self, encoded: bytes) -> None:
        pass
