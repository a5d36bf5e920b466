"""Planted bug: a loaded file's entries are stored under the empty namespace, whatever tenant wrote them."""

import dataclasses

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.ncm import PrefixCache as _ReferenceCache


class PrefixCache(_ReferenceCache):
    def load(self, path) -> int:
        staging = _ReferenceCache(max_bytes=2**62)  # unbounded: only the namespace differs from the reference
        count = staging.load(path)
        for key, entry in staging._entries.values():
            self.store(dataclasses.replace(key, namespace=""), entry)
        return count
