"""The protocol an implementation under test provides, and how it is loaded.

Like a conformance suite, the properties take their kernels from a module
named at the command line (``make verify IMPL=my.module`` or
``pytest properties --impl my.module``). The module provides, as top-level
callables with the signatures of the reference in :mod:`ncm_verify.speculative`:

``verify_chain(target_probs [B, G+1, V], draft_probs [B, G, V], draft_tokens [B, G], *, key, num_draft=None)``
    returns a ``ChainOutcome(tokens [B, G+1] int32, num_accepted [B] int32)``;
    ``tokens`` holds the accepted drafts, then one corrected or bonus token,
    then -1. ``key`` is one ``mx.random.key`` or one per sequence ``[B, 2]``.
``verify_greedy(target [B, G+1, V], draft_tokens [B, G], *, num_draft=None)``
    returns a ``ChainOutcome`` (deterministic; no key).
``verify_factorized(target_probs [B, N, V], draft_probs [B, N, V], draft_tokens [B, N], *, key)``
    returns a ``FactorizedOutcome(tokens [B, N], accepted [B, N] bool)``.
``verify_latent_chain(target_latent_probs [B, K], draft_latent_probs [B, K], draft_latent [B], target_token_probs [B, K, N, V], draft_token_probs [B, K, N, V], draft_tokens [B, N], *, key)``
    returns a ``LatentChainOutcome(latent [B], latent_accepted [B] bool, tokens [B, N], accepted [B, N] bool)``.
``residual_distribution(p [..., V], q [..., V])``
    returns normalised ``max(p - q, 0)`` (``p`` where the residual is zero).
``apply_chain(target_probs, draft_probs, draft_tokens, num_draft, uniforms [B, 2, G+1])``,
``apply_factorized(target_probs, draft_probs, draft_tokens, uniforms [B, 2, N])``,
``apply_latent_chain(..., draft_tokens, uniforms [B, 2, N+1])``
    the same steps given their uniforms (row 0 decides acceptance, row 1
    draws corrections), unvalidated and traceable by ``mx.compile``; the
    properties use them to pin acceptance at the uniform's extremes and to compare
    each step with a float64 oracle given drawn uniforms. Draft i is accepted iff
    ``u[b, 0, i] * q(x) < p(x)``; a correction is the smallest id k whose cumulative
    weight reaches ``u * total``, drawn with ``u[b, 1, 0]`` (chain), ``u[b, 1, i]``
    (factorised position i) or ``u[b, 1, 0]``/``u[b, 1, i + 1]`` (latent, token i).
``draw_uniforms(key, batch, shape)`` (optional; the verify == apply property needs it)
    the uniforms ``[B, *shape]`` a ``verify_*`` call with ``key`` hands its ``apply_*``.

``verify_*`` take ``validate=False`` to skip input checks so that ``mx.compile`` can trace them.

All must raise ``ValueError`` naming the argument on invalid input. An
implementation may also provide the NCM model and cache names listed in
``NCM_NAMES`` and the decoding names in ``MLX_LM_NAMES``; properties of the parts it
lacks fail with a clear message.
"""

from __future__ import annotations

import importlib
from types import ModuleType

DEFAULT_IMPLEMENTATION = "ncm_verify.reference"

SPECULATIVE_NAMES = (
    "verify_chain",
    "verify_greedy",
    "verify_factorized",
    "verify_latent_chain",
    "residual_distribution",
    "apply_chain",
    "apply_factorized",
    "apply_latent_chain",
)
NCM_NAMES: tuple[str, ...] = (
    "NCMConfig",  # the config dataclass: fields as in ncm_verify.ncm.config
    "make_model",  # (config) -> model in eval mode, deterministic from config.seed
    "save_model",  # (model, path) -> None: safetensors
    "load_model",  # (path) -> model
    "fingerprint",  # (model) -> str: hash of config and weights
    "layer_states",  # (model, tokens [B, T]) -> per-layer hidden states [B, T, d]
    # Generation: tokens, latents, latent_logits, token_logits (per level), positions (per layer),
    # margin (smallest Gumbel top-2 gap: a near tie excuses a token flip), cache_hits (rows served)
    "generate_uncached",  # (model, prefix [B, P], key: one key, split per row, or [B, 2]) -> Generation
    "generate_cached",  # (model, prefix, key, cache=None, namespace="") -> Generation
    "PrefixCache",  # (max_bytes) with keys_for/lookup/store/save/load, hits/misses/evictions, nbytes
)
MLX_LM_NAMES: tuple[str, ...] = (
    # Autoregressive decoding with a causal-mask model, mlx-lm conventions (claim C8); a cache is one per layer.
    "KVCache",  # () with update_and_fetch(keys, values), state, offset, size(), is_trimmable(), trim(n) -> n
    "RotatingKVCache",  # (max_size): the newest max_size positions; trim either exact or refused, never a no-op
    "make_prompt_cache",  # (model, max_kv_size=None) -> list of per-layer caches
    "can_trim_prompt_cache",  # (cache) -> bool
    "trim_prompt_cache",  # (cache, num_tokens) -> number trimmed (0 when some layer cannot be)
    "apply_model",  # (model, tokens [B, T], cache) -> next-token logits [B, T, V]; updates cache
    "apply_prefill",  # (model, prompt [B, T], cache, prefill_step_size=512) -> prompt[:, -1:]; caches the rest
    "rewind_caches",  # (target_cache, draft_cache, num_draft, num_accepted): drop rejected drafts' K/V
    "speculative_generate",  # (target, draft, prompt, max_tokens, *, num_draft, key=None, kernels) -> max_tokens ids
)


def load_implementation(name: str = DEFAULT_IMPLEMENTATION) -> ModuleType:
    """Import the implementation module `name` and check it names the kernels."""
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        raise ValueError(f"impl: cannot import implementation module {name!r}: {error}") from error
    missing = [attr for attr in SPECULATIVE_NAMES if not callable(getattr(module, attr, None))]
    if missing:
        raise ValueError(f"impl: module {name!r} lacks {', '.join(missing)}")
    return module


def require_names(module: ModuleType, names: tuple[str, ...], what: str, needed_by: str) -> ModuleType:
    """`module` once checked to provide every one of `names`; a ValueError naming those it lacks."""
    missing = [attr for attr in names if getattr(module, attr, None) is None]
    if missing:
        raise ValueError(
            f"impl: module {module.__name__!r} provides no {what} ({', '.join(missing)} missing); "
            f"{needed_by} need them"
        )
    return module


def ncm_api(module: ModuleType) -> ModuleType:
    """`module` checked to provide the NCM model and prefix cache (`NCM_NAMES`)."""
    return require_names(module, NCM_NAMES, "NCM model/cache", "the prefix-caching properties")


def mlx_lm_api(module: ModuleType) -> ModuleType:
    """`module` checked to provide autoregressive decoding (`MLX_LM_NAMES`)."""
    return require_names(module, MLX_LM_NAMES, "autoregressive decoding", "the mlx-lm convention properties (C8)")
