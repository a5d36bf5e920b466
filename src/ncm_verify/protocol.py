"""The protocol an implementation under test provides, and how it is loaded.

Like a conformance suite, the properties take their kernels from a module
named at the command line (``make verify IMPL=my.module`` or
``pytest properties --impl my.module``). The module provides, as top-level
callables with the signatures of the reference in :mod:`ncm_verify.reference.speculative`:

``verify_chain(target_probs [B, G+1, V], draft_probs [B, G, V], draft_tokens [B, G], *, key, num_draft=None)``
    returns a ``ChainOutcome(tokens [B, G+1] int32, num_accepted [B] int32)``;
    ``tokens`` holds the accepted drafts, then one corrected or bonus token,
    then -1. ``key`` is one ``mx.random.key`` or one per sequence ``[B, 2]``.
``verify_greedy(target [B, G+1, V], draft_tokens [B, G], *, num_draft=None)``
    returns a ``ChainOutcome`` (deterministic; no key).
``verify_factorized(target_probs [B, N, V], draft_probs [B, N, V], draft_tokens [B, N], *, key)``
    returns a ``FactorizedOutcome(tokens [B, N], accepted [B, N] bool)``.
``verify_latent_chain(target_latent_probs [B, K], draft_latent_probs [B, K], draft_latent [B],
    target_token_probs [B, K, N, V], draft_token_probs [B, K, N, V], draft_tokens [B, N], *, key)``
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
``NCM_NAMES`` and the decoding names in ``MLX_LM_NAMES``; a property that needs a name
the module lacks is reported "not provided", and so is one whose calls reached only
names the module re-exports from the reference (``from ncm_verify.reference import *``).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
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
    "draw_uniforms",  # (key, batch, shape) -> the uniforms [B, *shape] verify_* hands apply_* (C11)
)
NCM_NAMES: tuple[str, ...] = (
    "NCMConfig",  # the config dataclass: fields as in ncm_verify.reference.ncm.config
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
    # Autoregressive decoding with a causal-mask model: mlx-lm conventions (claim C8), the project's stricter
    # contract (C11); a cache is one per layer, and the model attends to what update_and_fetch returns.
    # () with update_and_fetch(keys, values) -> attended K/V, offset, size(), is_trimmable(), trim(n) -> count
    "KVCache",
    "RotatingKVCache",  # (max_size, keep=0): mlx-lm's window; a trim either exact or a ValueError naming n
    "make_prompt_cache",  # (model, max_kv_size=None) -> list of per-layer caches
    "can_trim_prompt_cache",  # (cache) -> bool
    "trim_prompt_cache",  # (cache, num_tokens) -> number trimmed (0 when some layer cannot be)
    "apply_model",  # (model, tokens [B, T], cache) -> next-token logits [B, T, V]; updates cache
    "apply_prefill",  # (model, prompt [B, T], cache, prefill_step_size=512) -> prompt[:, -1:]; caches the rest
    "rewind_caches",  # (target_cache, draft_cache, num_draft, num_accepted): drop rejected drafts' K/V
    "speculative_generate",  # (target, draft, prompt, max_tokens >= 0, *, num_draft, key=None, kernels) -> ids
)

LEVEL_DRAFT_NAMES: tuple[str, ...] = (
    # (target, draft, prefix [B, P], key or None (greedy), *, num_draft, cache, namespace, recompute, kernels)
    #   -> LevelDraftGeneration
    "generate_level_speculative",
    # (target, kv, covered, tokens [B, start(level)], drafted [per level [B, n]], level, bonus)
    #   -> per-level latent logits [B, K], per-level token logits for every code [B, K, n, V], K/V
    "verify_drafted_levels",
)


PROTOCOL_NAMES = SPECULATIVE_NAMES + NCM_NAMES + MLX_LM_NAMES
KERNEL_CLAIMS = {
    "verify_chain": "C5",
    "apply_chain": "C5",
    "residual_distribution": "C5",
    "verify_greedy": "C7",
    "verify_factorized": "C6",
    "apply_factorized": "C6",
    "verify_latent_chain": "C6",
    "apply_latent_chain": "C6",
    **{name: "C8" for name in MLX_LM_NAMES},
}
"""The distribution claim each kernel's output bears on: a failure on that kernel counts against it."""
NOT_PROVIDED = "not provided by"
"""How a skip for a protocol name the module lacks begins; the report reads it as 'not provided'."""


class ImplementationError(ValueError):
    """The implementation module cannot be loaded; the message says why, once."""


def is_path(name: str) -> bool:
    return name.endswith(".py") or "/" in name or "\\" in name


def suggest(name: str) -> str:
    """' Did you mean X?' when one part of a dotted name is within reach of a real module, else ''."""
    parts = name.split(".")
    for depth in range(len(parts) - 1, -1, -1):  # the deepest package that does import
        parent = ".".join(parts[:depth])
        try:
            search = importlib.import_module(parent).__path__ if parent else None
        except (ImportError, AttributeError):
            continue
        found = [m.name for m in pkgutil.iter_modules(search)]
        close = difflib.get_close_matches(parts[depth], found, n=1, cutoff=0.75)
        if not close or close[0] == parts[depth]:
            return ""
        return f" Did you mean {'.'.join([*parts[:depth], close[0], *parts[depth + 1 :]])!r}?"
    return ""


def refuse_shadowing(module_name: str, path: Path) -> ModuleType:
    raise ImplementationError(
        f"impl: {str(path)!r} would be imported as {module_name!r}, which names another module; rename the file"
    )


def import_implementation(name: str) -> ModuleType:
    """The module named `name` (dotted), or loaded from the file `name`; one clear ImplementationError otherwise."""
    if is_path(name):
        path = Path(name).expanduser().resolve()
        if not path.is_file():
            raise ImplementationError(f"impl: no file {str(path)!r}")
        module_name = path.stem
        known = sys.modules.get(module_name)
        if known is not None and Path(getattr(known, "__file__", "") or "").resolve() == path:
            return known
        try:
            elsewhere = known or importlib.util.find_spec(module_name)
        except (ImportError, ValueError):
            elsewhere = None
        if elsewhere is not None and Path(getattr(elsewhere, "origin", None) or "").resolve() != path:
            return refuse_shadowing(module_name, path)
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[module_name]
            raise ImplementationError(
                f"impl: importing {str(path)!r} raised {type(error).__name__}: {error}"
            ) from error
        return module
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImplementationError(
            f"impl: cannot import implementation module {name!r}: {error}.{suggest(name)} "
            "A module outside the project is named by its file path (IMPL=path/to/kernels.py), "
            "or made importable by installing it into .venv or adding its folder to PYTHONPATH."
        ) from error
    except Exception as error:  # the module exists but its own code fails
        raise ImplementationError(f"impl: importing {name!r} raised {type(error).__name__}: {error}") from error


def load_implementation(name: str = DEFAULT_IMPLEMENTATION) -> ModuleType:
    """Import the implementation module `name` (dotted name or file path); it must provide some protocol name."""
    module = import_implementation(name)
    if not any(getattr(module, attr, None) is not None for attr in PROTOCOL_NAMES):
        names = ", ".join(PROTOCOL_NAMES)
        raise ImplementationError(f"impl: module {name!r} provides none of the protocol's names ({names})")
    return module


def origin_of(value) -> str | None:
    """The module that defines `value` (a function, class, or a partial of one)."""
    target = getattr(value, "func", value)
    return getattr(target, "__module__", None)


def own_names(module: ModuleType) -> dict[str, bool]:
    """Protocol name -> whether `module` provides it itself rather than re-exporting the reference's object."""
    if module.__name__ == DEFAULT_IMPLEMENTATION:
        return {name: True for name in PROTOCOL_NAMES if hasattr(module, name)}
    reference = importlib.import_module(DEFAULT_IMPLEMENTATION)
    return {
        name: getattr(module, name) is not getattr(reference, name, None)
        for name in PROTOCOL_NAMES
        if getattr(module, name, None) is not None
    }


def describe_implementation(module: ModuleType, argument: str) -> dict:
    """What the report names as tested: module, file, sha256 of its source, the names it defines and inherits."""
    path = getattr(module, "__file__", None)
    own = own_names(module)
    return {
        "module": module.__name__,
        "argument": argument,
        "path_argument": argument if is_path(argument) else None,
        "path": path,
        "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest() if path and Path(path).is_file() else None,
        "defines": sorted(name for name, mine in own.items() if mine),
        "inherits": sorted(
            f"{name} (from {origin_of(getattr(module, name))})" for name, mine in own.items() if not mine
        ),
        "missing": [name for name in PROTOCOL_NAMES if name not in own],
    }


class RecordingImplementation:
    """The implementation module seen through a recorder: calls per protocol name, and which it provides itself.

    Functions are wrapped to count calls; classes count when looked up. A protocol name the module lacks
    skips the property as not provided (Hypothesis re-raises skips at once, so no example is wasted).
    """

    def __init__(self, module: ModuleType):
        self._module = module
        self._own = own_names(module)
        self.calls: dict[str, int] = {}
        self.example_names: set[str] = set()
        self.looked_up: set[str] = set()

    def begin_test(self) -> None:
        self.calls, self.example_names, self.looked_up = {}, set(), set()

    def begin_example(self) -> None:
        self.example_names = set()

    def record(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        self.example_names.add(name)

    def call_records(self) -> dict[str, dict]:
        return {
            name: {"calls": n, "own": self._own.get(name, False), "origin": origin_of(getattr(self._module, name))}
            for name, n in sorted(self.calls.items())
        }

    def __getattr__(self, name: str):
        # every name read, called or not: a run may reuse a property's reference evidence only when each of them
        # is the reference's own object (run.reusable_properties); Hypothesis probes for hooks the module lacks
        if name in PROTOCOL_NAMES or hasattr(self._module, name):
            self.looked_up.add(name)
        value = getattr(self._module, name, None)
        if name not in PROTOCOL_NAMES:
            if value is None and not hasattr(self._module, name):
                raise AttributeError(name)
            return value
        if value is None:
            import pytest

            pytest.skip(f"{NOT_PROVIDED} {self._module.__name__}: it has no {name}")
        if isinstance(value, type) or not callable(value):
            self.record(name)
            return value

        @functools.wraps(value)
        def recorded(*args, **kwargs):
            self.record(name)
            return value(*args, **kwargs)

        return recorded


def require_names(module: ModuleType, names: tuple[str, ...], what: str, needed_by: str) -> ModuleType:
    """`module` once checked to provide every one of `names`; a ValueError naming those it lacks."""
    missing = [attr for attr in names if getattr(module, attr, None) is None]
    if missing:
        raise ValueError(
            f"impl: module {module.__name__!r} provides no {what} ({', '.join(missing)} missing); {needed_by} need them"
        )
    return module


def ncm_api(module: ModuleType) -> ModuleType:
    """`module` checked to provide the NCM model and prefix cache (`NCM_NAMES`)."""
    return require_names(module, NCM_NAMES, "NCM model/cache", "the prefix-caching properties")


def mlx_lm_api(module: ModuleType) -> ModuleType:
    """`module` checked to provide autoregressive decoding (`MLX_LM_NAMES`)."""
    return require_names(module, MLX_LM_NAMES, "autoregressive decoding", "the mlx-lm convention properties (C8)")
