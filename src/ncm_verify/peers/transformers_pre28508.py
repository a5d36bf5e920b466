"""A planted historical bug: transformers' chain step with its correction as it stood before PR #28508.

transformers 4.37 drew the correction from ``softmax(clamp(p - q, 0))`` instead of normalising the
residual (fixed by huggingface/transformers#28508). This peer is the installed ``_speculative_sampling``
with that one expression restored, compiled in its own module's namespace, behind the same adapter as
:mod:`ncm_verify.peers.transformers_step`. It must fail the chain sampling properties: `make verify-peers`
fails if it does not.
"""

from __future__ import annotations

import functools
import inspect
import textwrap
from collections.abc import Callable

from ncm_verify.peers import transformers_step
from ncm_verify.peers.transformers_step import CAPABILITIES, versions
from ncm_verify.reference.speculative import ChainOutcome

__all__ = ["ACCEPTANCE_RULE", "CAPABILITIES", "PLANTED", "apply_chain", "verify_chain", "versions"]

ACCEPTANCE_RULE = "optimal"
"""The rule it means to follow; its correction breaks it (the residual softmaxed, not normalised)."""
FIXED = "torch.clamp((p_n_plus_1 - q_n_plus_1), min=0)"
AS_IT_STOOD = "torch.clamp((p_n_plus_1 - q_n_plus_1), min=0).softmax(dim=-1)"
PLANTED = "correction softmax(clamp(p - q, 0)) as before huggingface/transformers#28508"
"""What this peer plants; the comparison expects it to fail."""


@functools.cache
def speculative_sampling() -> Callable:
    """The installed ``_speculative_sampling`` with its residual softmaxed, as it stood before #28508."""
    module = transformers_step.transformers_module()
    source = textwrap.dedent(inspect.getsource(module._speculative_sampling))
    if source.count(FIXED) != 1:
        raise ImportError(f"transformers' _speculative_sampling no longer has one {FIXED!r}: cannot plant the bug")
    namespace: dict = {}
    exec(compile(source.replace(FIXED, AS_IT_STOOD), str(module.__file__), "exec"), module.__dict__, namespace)
    return namespace["_speculative_sampling"]


def verify_chain(target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate=True) -> ChainOutcome:
    """The pre-#28508 step on each sequence, drawing from torch seeded by `key`."""
    return transformers_step.verify_chain_with(
        speculative_sampling(), target_probs, draft_probs, draft_tokens, key=key, num_draft=num_draft
    )


def apply_chain(target_probs, draft_probs, draft_tokens, num_draft, uniforms) -> ChainOutcome:
    """The pre-#28508 step on each sequence, its draws at `uniforms [B, 2, G+1]`."""
    module = transformers_step.transformers_module()
    return transformers_step.apply_chain_with(
        speculative_sampling(), module, target_probs, draft_probs, draft_tokens, num_draft, uniforms
    )
