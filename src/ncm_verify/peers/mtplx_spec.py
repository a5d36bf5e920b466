"""mtplx 2.12.2's rule and cache modules, driven directly: its loop (`generation.py`) does not import on Linux.

`mtplx/generation.py` loads ``/usr/lib/libSystem.B.dylib`` at import (macOS), so the loop, its server and its
batched engine cannot run here. What runs: its rule (`sampling.verify_one_token`: accept with min(1, p/q), else
draw from norm(max(p - q, 0)); `acceptance_probability`, `residual_distribution`, `sample_from_distribution`), the
target distribution it builds (`sampling.distribution_from_logits` on the host, `fast_sampling.
sparse_distribution_from_mlx_logits` on the device) and its rollback helpers (`cache_state.
snapshot_untrimmable_cache`, `rollback_after_verify`) on mlx-lm 0.31's own caches, in the order `generation.py`
calls them (snapshot, verify pass, rollback, re-forward of the accepted tokens). `planted()` replaces the
residual by p.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import mlx.core as mx
import numpy as np

from ncm_verify.peers.mlx_tiny import MLX_LM_KINDS, make_mlx_lm_target

PACKAGE = "mtplx"
VERSION = "2.12.2"
TARGET_KINDS = MLX_LM_KINDS


class ScriptedRng:
    """A stand-in for `numpy.random.Generator` that returns a set uniform and records each `choice`'s law.

    `verify_one_token` draws ``rng.random()`` for acceptance and, on rejection, ``rng.choice(ids, p=law)``
    (`sample_from_distribution`); scripting the first and reading the second gives its exact output law.
    """

    def __init__(self, uniform: float):
        self.uniform = uniform
        self.choices: list[tuple[np.ndarray, np.ndarray]] = []

    def random(self) -> float:
        return self.uniform

    def choice(self, ids, p):
        self.choices.append((np.asarray(ids), np.asarray(p, dtype=np.float64)))
        return int(np.asarray(ids)[int(np.argmax(p))])


def dense(distribution, vocab: int) -> np.ndarray:
    """A mtplx distribution (dense array or `SparseDistribution`) as a dense float64 vector."""
    if hasattr(distribution, "to_dense"):
        return np.asarray(distribution.to_dense(), dtype=np.float64)
    return np.asarray(distribution, dtype=np.float64).reshape(vocab)


def rule_law(p, q, vocab: int) -> tuple[np.ndarray, list[str]]:
    """The exact law of the token mtplx's `verify_one_token(p, q, x, rng)` emits when x is drawn from q.

    Per draft x with q(x) > 0: the acceptance probability a the call reports, checked against its branch (a
    uniform of a accepts x, the next float above rejects), and the law it hands `rng.choice` on rejection.
    Returns the law and what contradicted the rule's own report (empty when consistent).
    """
    from mtplx.sampling import verify_one_token

    law, problems = np.zeros(vocab), []
    for x in np.flatnonzero(dense(q, vocab) > 0):
        accept = verify_one_token(p, q, int(x), ScriptedRng(0.0)).accept_probability
        at = verify_one_token(p, q, int(x), ScriptedRng(accept))
        if accept > 0 and not (at.accepted and at.token_id == x):
            problems.append(f"draft {x}: a uniform of {accept} (its acceptance probability) did not accept it")
        residual = np.zeros(vocab)
        if accept < 1:
            rng = ScriptedRng(float(np.nextafter(accept, 2.0)))
            above = verify_one_token(p, q, int(x), rng)
            if above.accepted or len(rng.choices) != 1:
                problems.append(f"draft {x}: a uniform above {accept} accepted or drew no correction")
                continue
            ids, probs = rng.choices[0]
            np.add.at(residual, ids.astype(np.int64), probs / probs.sum())
        law += dense(q, vocab)[x] * (min(accept, 1.0) * np.eye(vocab)[x] + (1 - min(accept, 1.0)) * residual)
    return law, problems


def distributions(logits: np.ndarray, temperature: float, top_p: float, top_k: int, counts=None, presence=0.0,
                  frequency=0.0):  # fmt: skip
    """mtplx's target distribution for `logits` ``[V]``: (host `distribution_from_logits`, device sparse one or
    None where mtplx falls back to the host)."""
    from mtplx.fast_sampling import sparse_distribution_from_mlx_logits
    from mtplx.sampling import SamplerConfig, distribution_from_logits

    config = SamplerConfig(
        temperature=temperature, top_p=top_p, top_k=top_k, presence_penalty=presence, frequency_penalty=frequency
    )
    host = distribution_from_logits(np.asarray(logits, dtype=np.float64), config, token_counts=counts)
    device = sparse_distribution_from_mlx_logits(mx.array(logits, dtype=mx.float32), config, token_counts=counts)
    return host, device


def make_target(kind: str, seed: int, vocab: int = 12):
    return make_mlx_lm_target(kind, seed, vocab)


def verify_then_rollback(target, prompt: list[int], verified: list[int], accepted: int):
    """mlx-lm caches after mtplx's verify-and-reject sequence: prompt, `snapshot_untrimmable_cache`, a verify pass
    over `verified`, `rollback_after_verify(cache, snapshot, len(verified))`, a forward of the first `accepted`."""
    from mlx_lm.models.cache import make_prompt_cache
    from mtplx.cache_state import rollback_after_verify, snapshot_untrimmable_cache

    cache = make_prompt_cache(target)
    target(mx.array([prompt]), cache=cache)
    snapshot = snapshot_untrimmable_cache(cache)
    target(mx.array([verified]), cache=cache)
    rollback_after_verify(cache, snapshot, verified_tokens=len(verified))
    if accepted:
        target(mx.array([verified[:accepted]]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def planted() -> contextlib.AbstractContextManager:
    """mtplx's rule with its residual replaced by p: a rejected draft is corrected from the target itself."""
    from mtplx import sampling

    return mock.patch.object(sampling, "residual_distribution", lambda target_p, draft_q: target_p)


class BlockRule:
    """mtplx's block verification (`qwen4_block_verify.build_verifier`, Sun et al.'s law with its water-fill
    look-ahead) as an `oracles.exact_block.BlockRule`: the accepted count's law from the ladder's conditional accept
    coins (``accept_probability``: depth d is kept with a_d given depth d-1 was), the correction from its
    `scaled_residual`, the bonus from the last target row (the module draws it from p_{D+1} unchanged).

    `residual` swaps in another correction (the planted control: the shipped chain's ``(p - q)+``)."""

    def __init__(self, residual=None):
        self.residual = residual

    @staticmethod
    def verifier(target: np.ndarray, draft: np.ndarray, drafts: np.ndarray):
        from mtplx.qwen4_block_verify import build_verifier

        count = len(drafts)
        built = build_verifier(
            draft_tokens=[int(x) for x in drafts],
            draft_probs=list(draft[:count]),
            target_list=list(target[:count]),
            vocab_size=target.shape[1],
        )
        if built is None:
            raise ValueError("target: mtplx declined to build a block verifier for these rows")
        return built

    def length_law(self, target: np.ndarray, draft: np.ndarray, drafts: np.ndarray) -> np.ndarray:
        if len(drafts) == 0:  # a round with no draft emits the bonus alone (mtplx arms nothing: build_verifier)
            return np.ones(1)
        coins = [float(a) for a in self.verifier(target, draft, drafts).accept_probability]
        law, reach = np.zeros(len(drafts) + 1), 1.0
        for depth, coin in enumerate(coins):
            law[depth] = reach * (1.0 - coin)
            reach *= coin
        law[len(drafts)] = reach
        return law

    def last_row(self, target: np.ndarray, draft: np.ndarray, drafts: np.ndarray, tau: int) -> np.ndarray:
        if tau == len(drafts):
            return np.asarray(target[tau], dtype=np.float64)
        if self.residual is not None:
            return self.residual(target[tau], draft[tau])
        vocab = target.shape[1]
        return dense(self.verifier(target, draft, drafts).scaled_residual(tau), vocab)


def chain_residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The shipped chain's correction ``norm((p - q)+)``: block verification's own only at depth 1."""
    weights = np.maximum(np.asarray(p, dtype=np.float64) - q, 0.0)
    return weights / weights.sum() if weights.sum() > 0 else np.asarray(p, dtype=np.float64)


def verify_then_trim(target, prompt: list[int], verified: list[int], keep: int, snapshot: bool = True):
    """mlx-lm caches after mtplx's trim path: prompt, (`snapshot_untrimmable_cache`,) a verify pass over `verified`,
    then `trim_verified_window_to_prefix` (or `trim_verified_window_without_snapshot`) keeping `keep` of them.
    Returns the caches, whether mtplx said it trimmed, and copies of the cache states just before the call."""
    import copy

    from mlx_lm.models.cache import make_prompt_cache
    from mtplx.cache_state import (
        snapshot_untrimmable_cache,
        trim_verified_window_to_prefix,
        trim_verified_window_without_snapshot,
    )

    cache = make_prompt_cache(target)
    target(mx.array([prompt]), cache=cache)
    taken = snapshot_untrimmable_cache(cache) if snapshot else None
    target(mx.array([verified]), cache=cache)
    mx.eval([c.state for c in cache])
    before = copy.deepcopy([c.state for c in cache])
    if taken is not None:
        done = trim_verified_window_to_prefix(cache, taken, verified_tokens=len(verified), keep_tokens=keep)
    else:
        done = trim_verified_window_without_snapshot(cache, verified_tokens=len(verified), keep_tokens=keep)
    mx.eval([c.state for c in cache])
    return cache, done, before
