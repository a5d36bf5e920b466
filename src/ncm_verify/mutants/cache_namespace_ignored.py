"""Planted bug: prefix cache keys leave out the tenant namespace (one tenant's entry serves another)."""

import dataclasses

from ncm_verify.mutants import make_prefix_cache
from ncm_verify.reference import *  # noqa: F401,F403

PrefixCache = make_prefix_cache(lambda key: dataclasses.replace(key, namespace=""))
