"""Planted bug in `verify_chain` alone: it hands `apply_chain` its uniform rows swapped.

The correction row decides acceptance and the acceptance row draws corrections; the
output law is unchanged, but verify_chain no longer equals apply_chain on the uniforms
`draw_uniforms` gives for its key, so a replay of the step disagrees with the run.
"""

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.chain import REFERENCE_RULES
from ncm_verify.reference._kernels.factory import Kernels
from ncm_verify.reference.speculative import make_uniforms


def swapped_rows(keys, shape):
    return make_uniforms(keys, shape)[:, ::-1]


verify_chain = Kernels(REFERENCE_RULES._replace(uniforms=swapped_rows)).verify_chain
