"""Planted bug: prefix cache keys hold every token but the last (a prefix differing there hits)."""

import dataclasses

from ncm_verify.mutants import make_prefix_cache
from ncm_verify.reference import *  # noqa: F401,F403

PrefixCache = make_prefix_cache(lambda key: dataclasses.replace(key, tokens=key.tokens[:-1]))
