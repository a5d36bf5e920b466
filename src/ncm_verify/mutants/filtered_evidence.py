"""Planted bug: correct wherever it answers, but three fixtures in five are turned away as if filtered.

Every kernel rejects (``hypothesis.reject``) the examples whose target row hashes to a nonzero residue,
so the properties pass on the two in five they keep. Nothing fails by assertion; the verdict must still refuse
to call the claims shown, because most of their examples were filtered out.
"""

import functools
import hashlib

import numpy as np
from hypothesis import reject

from ncm_verify import speculative
from ncm_verify.reference import *  # noqa: F401,F403

KEPT, OUT_OF = 2, 5


def turned_away(target) -> bool:
    """Whether this fixture is filtered: decided by its first target row, so every call of one example agrees."""
    try:
        row = np.asarray(target[(0,) * (target.ndim - 1)], dtype=np.float32)
    except (ValueError, TypeError, RuntimeError):  # traced under mx.compile: no values to read
        return False
    return int(hashlib.sha256(row.tobytes()).hexdigest(), 16) % OUT_OF >= KEPT


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
