"""Planted bug: prefix cache keys pack token ids as uint16, so id 65 541 serves the entry of id 5."""

import dataclasses

from ncm_verify.mutants import make_prefix_cache
from ncm_verify.reference import *  # noqa: F401,F403

PrefixCache = make_prefix_cache(lambda key: dataclasses.replace(key, tokens=tuple(t & 0xFFFF for t in key.tokens)))
