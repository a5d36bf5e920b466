"""transformers' own chain step, ``_speculative_sampling``, through the protocol (``--impl`` this module).

What is judged is the installed transformers' code: this adapter hands it one sequence at a time,
logits ``log p`` in the input's dtype (transformers softmaxes them itself), and converts its answer
to the protocol's layout. ``verify_chain`` lets it draw with torch's own generator, seeded from the key;
``apply_chain`` feeds the protocol's uniforms where its code draws them: ``torch.rand_like`` (the
acceptance row, in the ratio's dtype, as its generator would give them) and ``torch.multinomial``
(the inverse CDF at the emission uniform, after torch's own checks of the weights), patched only
during the call and only as its module looks them up.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import ModuleType

import mlx.core as mx
import numpy as np

from ncm_verify.reference.speculative import ChainOutcome, all_drafts, per_sequence_keys

ACCEPTANCE_RULE = "optimal"
"""Accept a draft with probability min(1, p/q), as ``r <= p / q``; correct from normalised max(p - q, 0)."""
CAPABILITIES = {
    "traceable": "a PyTorch function: mx.compile cannot trace it",
    "value_error_contract": "transformers validates nothing here: bad input passes or raises torch's own errors",
}
"""What this peer cannot do, with the reason; a property that needs one reads 'not applicable: <reason>'."""
PAD_TOKEN = -1
"""The protocol's padding after the emitted tokens."""


@functools.cache
def transformers_module() -> ModuleType:
    """``transformers.generation.utils``, where ``_speculative_sampling`` lives and looks up ``torch``."""
    import torch
    from transformers.generation import utils

    # One thread, as MLX's CPU ops run: torch's default OpenMP threads spin against a busy
    # machine's other processes (measured 22x slower under load 10 on 2 cores).
    torch.set_num_threads(1)
    return utils


def versions() -> str:
    """'transformers X, torch Y': the code this peer judges."""
    import torch
    import transformers

    return f"transformers {transformers.__version__}, torch {torch.__version__}"


def speculative_sampling() -> Callable:
    return transformers_module()._speculative_sampling


def as_numpy(array) -> np.ndarray:
    """An MLX (or NumPy) array as NumPy; half precision widened to float32 exactly."""
    if isinstance(array, mx.array):
        if mx.issubdtype(array.dtype, mx.floating) and array.dtype != mx.float32:
            array = array.astype(mx.float32)
        return np.array(array)
    return np.asarray(array)


def torch_dtype(array):
    """The torch dtype of `array`'s values: logits are handed over in the input's own precision."""
    import torch

    if isinstance(array, mx.array):
        return {mx.float16: torch.float16, mx.bfloat16: torch.bfloat16}.get(array.dtype, torch.float32)
    return torch.float64 if np.asarray(array).dtype == np.float64 else torch.float32


def as_logits(probs: np.ndarray, dtype):
    """``log p`` (``-inf`` where p = 0), computed in float64 and rounded once to `dtype`."""
    import torch

    with np.errstate(divide="ignore", invalid="ignore"):
        return torch.from_numpy(np.log(np.asarray(probs, dtype=np.float64))).to(dtype)


class ChainInputs:
    """The batch as transformers takes it: per-sequence logits and ids, the draft lengths."""

    def __init__(self, target_probs, draft_probs, draft_tokens, num_draft):
        import torch

        dtype = torch_dtype(target_probs)
        self.target = as_logits(as_numpy(target_probs), dtype)
        self.draft = as_logits(as_numpy(draft_probs), dtype)
        self.tokens = torch.from_numpy(as_numpy(draft_tokens).astype(np.int64))
        batch, max_draft = self.tokens.shape
        self.num_draft = as_numpy(num_draft if num_draft is not None else all_drafts(batch, max_draft))
        self.batch, self.max_draft = batch, max_draft

    def sequence(self, b: int) -> tuple:
        """``_speculative_sampling``'s arguments for sequence `b`: its ``num_draft[b]`` drafts only."""
        drafts = int(self.num_draft[b])
        return (
            self.tokens[b : b + 1, :drafts],
            self.draft[b : b + 1, :drafts],
            drafts,
            self.target[b : b + 1, : drafts + 1],
        )


def emitted_row(valid_tokens, n_matches, max_draft: int) -> tuple[np.ndarray, int]:
    """transformers' ``(valid_tokens [1, n+1], n)`` as the protocol's row ``[G+1]`` padded with -1."""
    row = np.full(max_draft + 1, PAD_TOKEN, dtype=np.int32)
    emitted = valid_tokens.reshape(-1).numpy()
    row[: len(emitted)] = emitted
    return row, int(n_matches)


def run_sequences(inputs: ChainInputs, sampling: Callable, before_each: Callable[[int], object]) -> ChainOutcome:
    """`sampling` on every sequence in turn (`before_each(b)` sets up its randomness), as one outcome."""
    import torch

    tokens = np.full((inputs.batch, inputs.max_draft + 1), PAD_TOKEN, dtype=np.int32)
    accepted = np.zeros(inputs.batch, dtype=np.int32)
    with torch.no_grad():
        for b in range(inputs.batch):
            before_each(b)
            valid_tokens, n_matches = sampling(*inputs.sequence(b))
            tokens[b], accepted[b] = emitted_row(valid_tokens, n_matches, inputs.max_draft)
    return ChainOutcome(mx.array(tokens), mx.array(accepted))


def key_seeds(key, batch: int) -> np.ndarray:
    """64-bit torch seeds from ``mx.random`` keys: one for the call (one key), else one per sequence ([B, 2])."""
    keys = np.array(key).astype(np.uint64).reshape(-1, 2)
    return (keys[:, 0] << np.uint64(32)) | keys[:, 1]


def verify_chain_with(
    sampling: Callable, target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate=True
) -> ChainOutcome:
    """`sampling` drawing with torch's generator seeded from `key` (`validate`: nothing to skip).

    One key seeds the call once (reseeding costs 60 us a sequence); per-sequence keys seed each sequence,
    so that a batch gives its rows' outcomes one at a time.
    """
    import torch

    inputs = ChainInputs(target_probs, draft_probs, draft_tokens, num_draft)
    per_sequence_keys(key, inputs.batch)  # the protocol's check of the key's type and shape
    seeds = key_seeds(key, inputs.batch)
    with torch.random.fork_rng(devices=[]):  # the caller's torch generator is left as it was
        if len(seeds) == 1:
            torch.manual_seed(int(seeds[0]))
        reseed = (lambda b: torch.manual_seed(int(seeds[b]))) if len(seeds) > 1 else (lambda b: None)
        return run_sequences(inputs, sampling, reseed)


class FedUniforms:
    """Stand-ins for ``torch.rand_like`` and ``torch.multinomial`` that return draws at given uniforms."""

    def __init__(self, uniforms: np.ndarray):
        self.uniforms = uniforms  # [B, 2, G+1]
        self.sequence = 0

    def rand_like(self, like, **kwargs):
        """The acceptance uniforms of this sequence, rounded to `like`'s dtype as torch's generator's would be."""
        import torch

        values = self.uniforms[self.sequence, 0, : like.numel()].reshape(tuple(like.shape))
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(like.dtype)

    def multinomial(self, weights, num_samples, *args, **kwargs):
        """The smallest id whose cumulative weight reaches ``u * total`` (u: the emission uniform), per row.

        torch's own multinomial runs first, so that weights it refuses (NaN, negative, zero sum) raise as they would.
        """
        import torch

        torch.multinomial(weights, num_samples, *args, **kwargs)
        rows = weights.detach().to(torch.float64).reshape(-1, weights.shape[-1]).numpy()
        cdf = np.cumsum(rows, axis=-1)
        u = float(self.uniforms[self.sequence, 1, 0])
        ids = [min(int(np.searchsorted(row, u * row[-1], side="left")), rows.shape[-1] - 1) for row in cdf]
        return torch.tensor(ids, dtype=torch.int64).reshape(-1, 1).repeat(1, num_samples)


class PatchedTorch:
    """``torch`` as a module sees it through its global name, with two of its draws replaced."""

    def __init__(self, torch: ModuleType, fed: FedUniforms):
        self._torch, self.rand_like, self.multinomial = torch, fed.rand_like, fed.multinomial

    def __getattr__(self, name: str):
        return getattr(self._torch, name)


@contextlib.contextmanager
def uniforms_fed(module: ModuleType, uniforms: np.ndarray) -> Iterator[FedUniforms]:
    """`module`'s global ``torch`` draws at `uniforms` for the duration of the block, and only there."""
    namespace = vars(module)  # the globals its functions read `torch` from
    original = namespace["torch"]
    fed = FedUniforms(uniforms)
    namespace["torch"] = PatchedTorch(original, fed)
    try:
        yield fed
    finally:
        namespace["torch"] = original


def apply_chain_with(
    sampling: Callable, module: ModuleType, target_probs, draft_probs, draft_tokens, num_draft, uniforms
) -> ChainOutcome:
    """`sampling` (whose globals are `module`'s) with its draws at `uniforms [B, 2, G+1]`."""
    inputs = ChainInputs(target_probs, draft_probs, draft_tokens, num_draft)
    with uniforms_fed(module, as_numpy(uniforms)) as fed:
        return run_sequences(inputs, sampling, lambda b: setattr(fed, "sequence", b))


def verify_chain(target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate=True) -> ChainOutcome:
    """transformers' ``_speculative_sampling`` on each sequence, drawing from torch seeded by `key`."""
    return verify_chain_with(
        speculative_sampling(), target_probs, draft_probs, draft_tokens, key=key, num_draft=num_draft
    )


def apply_chain(target_probs, draft_probs, draft_tokens, num_draft, uniforms) -> ChainOutcome:
    """transformers' ``_speculative_sampling`` on each sequence, its draws at `uniforms [B, 2, G+1]`."""
    return apply_chain_with(
        speculative_sampling(), transformers_module(), target_probs, draft_probs, draft_tokens, num_draft, uniforms
    )
