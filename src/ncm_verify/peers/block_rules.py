"""Published block-verification rules, written in NumPy from the paper and the pull requests that ship them.

Each rule is a `ncm_verify.oracles.exact_block.BlockRule`: for one drafted block (target rows ``[g+1, V]``,
draft rows ``[g, V]``, drafts ``[g]``) the law of the accepted count tau and the last token's law given tau.
Where a text leaves a detail open, the docstring says what was assumed. Judged by
:mod:`ncm_verify.peers.block_judgement`.
"""

from __future__ import annotations

import numpy as np

from ncm_verify.oracles.exact_block import PAPER_RULE, last_passing_law, weighted_residual
from ncm_verify.oracles.exact_tree import RESIDUAL_FLOOR

__all__ = [
    "VllmBlockRule",
    "TokenwiseTestLongestPrefix",
    "DraftProbabilityOne",
    "TokenwiseRule",
    "FirstFailureRule",
    "published_rules",
]


def _normalised(weights: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    mass = weights.sum()
    return weights / mass if mass > RESIDUAL_FLOOR else fallback


class VllmBlockRule:
    """vllm-project/vllm#46781 (Model Runner V2, ``rejection_sample_method="block"``) as its description states it.

    Prefix ratios in log space, ``log p_i = min(log p_{i-1} + log M_b(x_i) - log M_s(x_i), 0)``
    (``_compute_cumulative_log_p_kernel``); ``Z_i = sum_x max(p_{i-1} M_b(x) - M_s(x), 0)``
    (``_compute_local_residual_mass_kernel``); ``h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i)``, the last threshold
    ``p_N`` (the paper's, as the vllm-ascend#11985 port of this PR writes it, with ``h = 1`` where the
    denominator is 0); the accepted length is the last i with ``u_i <= h_i``; the recovered token comes from
    ``max(p_tau M_b - M_s, 0) / Z_{tau+1}``.
    """

    def _log_ratios(self, target, draft, drafts) -> np.ndarray:
        count = len(drafts)
        with np.errstate(divide="ignore"):
            steps = np.log(target[np.arange(count), drafts]) - np.log(draft[np.arange(count), drafts])
        logs = np.zeros(count + 1)
        for i in range(count):
            logs[i + 1] = min(logs[i] + steps[i], 0.0)
        return logs

    def length_law(self, target, draft, drafts) -> np.ndarray:
        count = len(drafts)
        prefix = np.exp(self._log_ratios(target, draft, drafts))
        local = np.maximum(prefix[:count, None] * target[:count] - draft, 0.0).sum(axis=1)  # Z_1 .. Z_N
        thresholds = np.empty(count)
        for i in range(1, count + 1):
            if i == count:
                thresholds[i - 1] = prefix[count]
            else:
                denominator = local[i] + 1.0 - prefix[i]
                thresholds[i - 1] = local[i] / denominator if denominator > 0 else 1.0
        return last_passing_law(thresholds)

    def last_row(self, target, draft, drafts, tau: int) -> np.ndarray:
        if tau == len(drafts):
            return target[tau]
        prefix = np.exp(self._log_ratios(target, draft, drafts))[tau]
        return _normalised(np.maximum(prefix * target[tau] - draft[tau], 0.0), target[tau])


class TokenwiseTestLongestPrefix:
    """vllm-project/vllm-ascend before #7808, as its issue #7807 describes it: the block path "uses the same
    acceptance criteria as the token-wise algorithm" (draft i passes iff ``u_i < min(1, p_i(x_i) / q_i(x_i))``),
    keeps the longest sub-block whose last draft passes (the block path's selection, #7808), and its recovered
    token comes "from the same distribution, regardless of whether block_verify is enabled":
    ``norm(max(p - q, 0))``. (The issue's words; its code is not in the corpus we read.)
    """

    def length_law(self, target, draft, drafts) -> np.ndarray:
        index = np.arange(len(drafts))
        chances = np.minimum(target[index, drafts] / draft[index, drafts], 1.0)
        return last_passing_law(chances)

    def last_row(self, target, draft, drafts, tau: int) -> np.ndarray:
        if tau == len(drafts):
            return target[tau]
        return weighted_residual(1.0, target[tau], draft[tau])


class DraftProbabilityOne:
    """vllm-project/vllm-ascend before #7603: with drafters that pass no draft probabilities (n-gram, suffix) the
    block path took ``draft_token_probs = 1.0`` inside ``cumprod(target_probs / draft_probs)``. Assumed beside it,
    as vLLM's sampler does without draft probabilities: q is the point mass at the drafted token in the residual
    masses and the recovered token. Exact when the drafter really is deterministic; judged here also on drafts
    sampled from a q the rule was not handed (the n-gram fallback applied to a probabilistic drafter).
    """

    def _as_point_masses(self, draft, drafts) -> np.ndarray:
        point = np.zeros_like(draft)
        point[np.arange(len(drafts)), drafts] = 1.0
        return point

    def length_law(self, target, draft, drafts) -> np.ndarray:
        return PAPER_RULE.length_law(target, self._as_point_masses(draft, drafts), drafts)

    def last_row(self, target, draft, drafts, tau: int) -> np.ndarray:
        return PAPER_RULE.last_row(target, self._as_point_masses(draft, drafts), drafts, tau)


class TokenwiseRule:
    """vllm-project/vllm-ascend before #15673: ``use_block_verification`` "accepted for API compatibility but
    silently ignored", so the token-wise rule ran (Leviathan et al.): drafts accepted in order while
    ``u_i < min(1, p/q)``, the first rejected one corrected from ``norm(max(p - q, 0))``. Exact, with the
    chain's accepted-count law, not the block's.
    """

    def length_law(self, target, draft, drafts) -> np.ndarray:
        index = np.arange(len(drafts))
        chances = np.minimum(target[index, drafts] / draft[index, drafts], 1.0)
        law = np.empty(len(drafts) + 1)
        for i in range(len(drafts) + 1):
            law[i] = np.prod(chances[:i]) * (1.0 - chances[i] if i < len(drafts) else 1.0)
        return law

    def last_row(self, target, draft, drafts, tau: int) -> np.ndarray:
        if tau == len(drafts):
            return target[tau]
        return weighted_residual(1.0, target[tau], draft[tau])


class FirstFailureRule:
    """The rule a review of vllm-project/vllm-ascend#11985 asked for: the paper's thresholds and correction, but
    "if a token at step i is rejected (u > h), all subsequent tokens must" be rejected: the prefix stops at the
    first failed threshold instead of keeping the last passing one.
    """

    def length_law(self, target, draft, drafts) -> np.ndarray:
        from ncm_verify.oracles.exact_block import block_quantities

        thresholds = block_quantities(target, draft, drafts).thresholds
        law = np.empty(len(drafts) + 1)
        for i in range(len(drafts) + 1):
            law[i] = np.prod(thresholds[:i]) * (1.0 - thresholds[i] if i < len(drafts) else 1.0)
        return law

    def last_row(self, target, draft, drafts, tau: int) -> np.ndarray:
        return PAPER_RULE.last_row(target, draft, drafts, tau)


def published_rules() -> dict:
    """Name -> (rule, what it follows) of every published variant judged."""
    return {
        "paper (Sun et al. Alg. 2)": (PAPER_RULE, "arXiv 2403.10444"),
        "vllm #46781": (VllmBlockRule(), "vllm-project/vllm#46781"),
        "vllm-ascend before #7808": (TokenwiseTestLongestPrefix(), "vllm-project/vllm-ascend#7807"),
        "vllm-ascend before #7603": (DraftProbabilityOne(), "vllm-project/vllm-ascend#7603"),
        "vllm-ascend before #15673": (TokenwiseRule(), "vllm-project/vllm-ascend#15673"),
        "vllm-ascend #11985 review": (FirstFailureRule(), "vllm-project/vllm-ascend#11985"),
    }
