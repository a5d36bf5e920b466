"""Planted bug: the drafts of one proposal verified with the rows (and codes) of a second one, under
another z (an autoregressive drafter: another draft path)."""

from dataclasses import replace

import mlx.core as mx
from mlx_lm.models.cache import trim_prompt_cache

from ncm_verify.mutants import with_drafting_step
from ncm_verify.reference import *  # noqa: F401,F403


def _propose_twice(drafter, cache, new_tokens, k, key, temperature, features):
    before = cache[0].offset
    first_key, second_key = mx.random.split(key)
    first = drafter.propose(cache, new_tokens, k, first_key, temperature=temperature, features=features)
    trim_prompt_cache(cache, cache[0].offset - before)
    second = drafter.propose(cache, new_tokens, k, second_key, temperature=temperature, features=features)
    return replace(second, tokens=first.tokens)


globals().update(with_drafting_step(propose=_propose_twice))
