"""Planted bug: correct wherever it answers, but most fixtures are turned away as if filtered.

Every kernel rejects (``hypothesis.reject``) the examples of an even vocabulary size (four of the seven
sizes 2..8 the chain and greedy fixtures draw), so the properties pass on the rest. Nothing fails by
assertion; the verdict must still refuse to call the claims shown, because most of their examples were filtered.
"""

import functools

from hypothesis import reject

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference import speculative


def turned_away(target) -> bool:
    """Whether this fixture is filtered: decided by its vocabulary, which every call of one example shares
    (a chain run calls the kernel once per round, on rows that differ)."""
    return target.shape[-1] % 2 == 0


def filtering(kernel):
    @functools.wraps(kernel)
    def filtered(target, *args, **kwargs):
        if turned_away(target):
            reject()
        return kernel(target, *args, **kwargs)

    return filtered


verify_chain = filtering(speculative.verify_chain)
verify_greedy = filtering(speculative.verify_greedy)
verify_factorized = filtering(speculative.verify_factorized)
verify_latent_chain = filtering(speculative.verify_latent_chain)
