"""Planted bug in `verify_chain` alone: it hands `apply_chain` its uniform rows swapped.

The correction row decides acceptance and the acceptance row draws corrections; the
output law is unchanged, but verify_chain no longer equals apply_chain on the uniforms
`draw_uniforms` gives for its key, so a replay of the step disagrees with the run.
"""

from functools import partial

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference import speculative


def swapped_rows(keys, shape):
    return speculative.make_uniforms(keys, shape)[:, ::-1]


verify_chain = partial(speculative.verify_chain, rules=speculative.REFERENCE_RULES._replace(uniforms=swapped_rows))
