"""Planted bug: prefix cache keys leave out the weights fingerprint (stale hits after a weight update)."""

import dataclasses

from ncm_verify.mutants import make_prefix_cache
from ncm_verify.reference import *  # noqa: F401,F403

PrefixCache = make_prefix_cache(lambda key: dataclasses.replace(key, fingerprint=""))
