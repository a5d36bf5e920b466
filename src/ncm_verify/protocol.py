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

All must raise ``ValueError`` naming the argument on invalid input.

A module may declare what it cannot do, ``CAPABILITIES = {name: reason}`` over `CAPABILITY_NAMES` (a
third-party peer: not traceable, another error contract); a property marked ``needs(name)`` then reads
"not applicable: <reason>" for it, neither a pass nor a failure. ``ACCEPTANCE_RULE`` names its rule. The protocol is
written once, as the Protocol classes below (one per family: ``SpeculativeKernels``,
``NCMModelAndCache``, ``Decoding``, ``LevelDrafting``, ``TreeVerification``, ``BlockVerification``); every name
list is derived from them. An implementation may provide any of the families; a property that needs a name
the module lacks is reported "not provided", and so is one whose calls reached only
names the module re-exports from the reference (``from ncm_verify.reference import *``).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

DEFAULT_IMPLEMENTATION = "ncm_verify.reference"


class SpeculativeKernels(Protocol):
    """The speculative-decoding kernels (claims C5, C6, C7, C11); shapes and rules as in the module docstring."""

    def verify_chain(self, target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate=True) -> Any:
        """Chain verification with residual correction -> ChainOutcome(tokens [B, G+1], num_accepted [B])."""

    def verify_greedy(self, target, draft_tokens, *, num_draft=None, validate=True) -> Any:
        """Greedy verification: the target's argmax decoding exactly -> ChainOutcome (no key)."""

    def verify_factorized(self, target_probs, draft_probs, draft_tokens, *, key, validate=True) -> Any:
        """Each position accepted or corrected on its own -> FactorizedOutcome(tokens [B, N], accepted [B, N])."""

    def verify_latent_chain(
        self,
        target_latent_probs,
        draft_latent_probs,
        draft_latent,
        target_token_probs,
        draft_token_probs,
        draft_tokens,
        *,
        key,
        validate=True,
    ) -> Any:
        """The latent first, then its tokens given the accepted latent -> LatentChainOutcome."""

    def residual_distribution(self, p, q) -> Any:
        """Normalised max(p - q, 0) over the last axis; p where the residual is zero."""

    def apply_chain(self, target_probs, draft_probs, draft_tokens, num_draft, uniforms) -> Any:
        """verify_chain given its uniforms [B, 2, G+1]: unvalidated, traceable by mx.compile."""

    def apply_factorized(self, target_probs, draft_probs, draft_tokens, uniforms) -> Any:
        """verify_factorized given its uniforms [B, 2, N]: unvalidated, traceable by mx.compile."""

    def apply_latent_chain(
        self,
        target_latent_probs,
        draft_latent_probs,
        draft_latent,
        target_token_probs,
        draft_token_probs,
        draft_tokens,
        uniforms,
    ) -> Any:
        """verify_latent_chain given its uniforms [B, 2, N+1]: unvalidated, traceable by mx.compile."""

    def draw_uniforms(self, key, batch, shape) -> Any:
        """The uniforms [B, *shape] a verify_* call with `key` hands its apply_* (C11; optional)."""


class NCMModelAndCache(Protocol):
    """The NCM model and its prefix cache (claims C1-C4)."""

    @property
    def NCMConfig(self) -> type:
        """The config dataclass: fields as in ncm_verify.reference.ncm.config."""

    def make_model(self, config) -> Any:
        """(config) -> model in eval mode, deterministic from config.seed."""

    def save_model(self, model, path) -> None:
        """(model, path) -> None: the weights as safetensors."""

    def load_model(self, path) -> Any:
        """(path) -> the model save_model wrote."""

    def fingerprint(self, model) -> str:
        """(model) -> str: a hash of config and weights."""

    def layer_states(self, model, tokens) -> Any:
        """(model, tokens [B, T]) -> per-layer hidden states [B, T, d]."""

    # A Generation holds tokens, latents, latent_logits, token_logits (per level), positions (per layer),
    # margin (smallest Gumbel top-2 gap: a near tie excuses a token flip), cache_hits (rows served)
    def generate_uncached(self, model, prefix, key) -> Any:
        """(model, prefix [B, P], key: one key, split per row, or [B, 2]) -> Generation."""

    def generate_cached(self, model, prefix, key, cache=None, namespace="") -> Any:
        """As generate_uncached, serving prefix states from `cache` -> Generation."""

    @property
    def PrefixCache(self) -> type:
        """(max_bytes) with keys_for/lookup/store/save/load, hits/misses/evictions, nbytes."""


class Decoding(Protocol):
    """Autoregressive decoding with a causal-mask model: mlx-lm conventions (C8), the stricter contract (C11).

    A cache is one per layer, and the model attends to what update_and_fetch returns.
    """

    @property
    def KVCache(self) -> type:
        """() with update_and_fetch(keys, values) -> attended K/V, offset, size(), is_trimmable(), trim(n)."""

    @property
    def RotatingKVCache(self) -> type:
        """(max_size, keep=0): mlx-lm's window; a trim either exact or a ValueError naming n."""

    def make_prompt_cache(self, model, max_kv_size=None) -> list:
        """(model, max_kv_size=None) -> list of per-layer caches."""

    def can_trim_prompt_cache(self, cache) -> bool:
        """(cache) -> whether every layer's cache can be trimmed."""

    def trim_prompt_cache(self, cache, num_tokens) -> int:
        """(cache, num_tokens) -> number trimmed (0 when some layer cannot be)."""

    def apply_model(self, model, tokens, cache) -> Any:
        """(model, tokens [B, T], cache) -> next-token logits [B, T, V]; updates cache."""

    def apply_prefill(self, model, prompt, cache, prefill_step_size=512) -> Any:
        """(model, prompt [B, T], cache) -> prompt[:, -1:]; caches the rest."""

    def rewind_caches(self, target_cache, draft_cache, num_draft, num_accepted) -> Any:
        """Drop the rejected drafts' K/V from both caches."""

    def speculative_generate(self, target, draft, prompt, max_tokens, *, num_draft, key=None, kernels=None) -> Any:
        """(target, draft, prompt, max_tokens >= 0, *, num_draft, key=None, kernels) -> token ids."""


class LevelDrafting(Protocol):
    """Drafting whole NCM levels with a draft NCM, verified in one target pass (claims C6, C11)."""

    def generate_level_speculative(
        self, target, draft, prefix, key, *, num_draft, cache=None, namespace="", recompute=False, kernels=None
    ) -> Any:
        """(target, draft, prefix [B, P], key or None (greedy), ...) -> LevelDraftGeneration."""

    def verify_drafted_levels(self, target, kv, covered, tokens, drafted, level, bonus) -> Any:
        """One target pass over drafted levels -> per-level latent logits, token logits for every code, K/V."""


class TreeVerification(Protocol):
    """Tree verification (claim C13): several drafted children per node; shapes in reference.tree."""

    def verify_tree(
        self, target_probs, draft_probs, tree_tokens, parents, *, key, num_nodes=None, mode=..., validate=True
    ) -> Any:
        """Tree verification (mode: how children were drawn) -> TreeOutcome(tokens, num_accepted, path)."""

    def apply_tree(self, target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, *, mode=...) -> Any:
        """verify_tree given its uniforms [B, 2, N+1]: unvalidated, traceable by mx.compile."""


class BlockVerification(Protocol):
    """Block verification (claim C16; Sun et al., arXiv 2403.10444): the chain's arguments and outcome, the
    drafted block judged jointly; shapes in reference.block."""

    def verify_block(self, target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate=True) -> Any:
        """The longest prefix passing the block's thresholds, then one token -> ChainOutcome(tokens, num_accepted)."""

    def apply_block(self, target_probs, draft_probs, draft_tokens, num_draft, uniforms) -> Any:
        """verify_block given its uniforms [B, 2, G+1]: u[b, 0, i] judges position i + 1, u[b, 1, 0] the last draw."""


class TextDrafting(Protocol):
    """A text drafter's blocks verified by an mlx-lm target in one pass each (reference.drafting)."""

    def generate_drafted(
        self,
        target,
        drafter,
        prompt,
        max_tokens,
        *,
        num_draft,
        key,
        temperature=1.0,
        kernels=None,
        target_cache=None,
        drafter_cache=None,
    ) -> Any:
        """(mlx-lm target, TextDrafter, prompt [T], max_tokens, *, num_draft, key, ...) -> DraftedGeneration."""


class TreeDrafting(Protocol):
    """Tree decoding over mlx-lm models: a draft expands a tree, the target scores it in one pass under a
    tree mask at per-node positions, `verify_tree` accepts a path, the caches keep it (reference.drafting.tree_loop)."""

    def generate_tree_drafted(
        self,
        target,
        draft,
        prompt,
        max_tokens,
        *,
        branching,
        mode,
        key,
        temperature=1.0,
        kernels=None,
        target_cache=None,
        draft_cache=None,
    ) -> Any:
        """(mlx-lm target, mlx-lm draft, prompt [T], max_tokens, *, branching, mode, key, ...) -> TreeGeneration."""

    def draw_tree_children(self, q_row, count, *, mode, key) -> Any:
        """(a node's q row [V], count, *, mode, key) -> its children as `mode` draws them; the loop's kernels draw."""


class SpeculativeRollback(Protocol):
    """mlx-lm's speculative loop over any mlx-lm model, hybrid and sliding-window ones included, with its own
    rollback (claim C18): recurrent state and wrapped rings cannot be trimmed (reference.drafting.speculative_step).
    """

    def make_sampler(self, temp=0.0, top_p=0.0, top_k=0) -> Any:
        """(temp, top_p, top_k) -> a sampler the loop takes: mlx-lm's transforms, greedy at temp 0."""

    def speculative_generate_step(
        self,
        prompt,
        model,
        draft_model,
        *,
        num_draft_tokens=2,
        max_tokens=256,
        sampler=None,
        logits_processors=None,
        prompt_cache=None,
        prefill_step_size=512,
        kernels=...,
    ) -> Any:
        """mlx-lm's call shape, verified by `kernels`, `prompt_cache` rolled back each round -> yields (token, ...)."""


class ConceptModels(Protocol):
    """The source's NCM (claims C1-C4): what a checkpoint implements, without our config.

    ``model`` is whatever `load_concept_model` returns; ``prefix`` ``[B, P]`` token ids (P any length
    >= 1); ``codes`` a list, level l ``[B, n_l]``; ``keys`` ``[B, 2]`` (one per row, `row_keys`);
    ``start`` the prefix's first position; K/V per layer ``(K, V)`` each ``[B, heads, rows, dim]``.
    """

    @property
    def ConceptConfig(self) -> type:
        """The implementation's own config type (what `concept_configs` draws)."""

    def concept_configs(self) -> Any:
        """A Hypothesis strategy of tiny configs (path (a): drawn instances)."""

    def make_concept_model(self, config) -> Any:
        """A model in evaluation mode built from a drawn config."""

    def save_concept_model(self, model, path) -> None:
        """Both stages' weights and whatever the loader needs, in one file."""

    def load_concept_model(self, path) -> Any:
        """The checkpoint at `path` (path (b)); a ValueError naming `path` when unreadable."""

    def concept_fingerprint(self, model) -> str:
        """A hash of the generator's and the codec's weights and config."""

    def concept_layout(self, model) -> Any:
        """prefix_length, level_lengths, codebook_sizes, vocab_size, sequence_length."""

    def concept_mask_of(self, model, prefix_length) -> Any:
        """Boolean ``[R, R]`` over ``prefix + levels`` rows, True where a row attends to a column."""

    def prefix_kv(self, model, prefix, start=0) -> Any:
        """Per layer, the prefix K/V the model would cache (K after its norm and rotation)."""

    def level_logits(self, model, prefix, codes, level, *, prefix_kv=None, start=0) -> Any:
        """Level `level`'s logits ``[B, n_l, K_l]`` given the coarser codes; prefix recomputed or given."""

    def training_logits(self, model, prefix, codes, start=0) -> Any:
        """Every level's logits from one forward over the whole layout given all codes."""

    def row_keys(self, seed, batch) -> Any:
        """``[batch, 2]`` keys, row b's a function of (seed, b) alone."""

    def sample_codes(self, logits, keys, temperature=1.0, top_k=None) -> Any:
        """Seeded codes ``[B, n]`` from logits ``[B, n, K]``: greedy at temperature 0."""

    def sampling_law(self, logits, temperature, top_k=None) -> Any:
        """The probabilities `sample_codes` draws from."""

    def codec_decode(self, model, codes) -> Any:
        """Token logits ``[B, T, V]``, one row per position, given every level's codes."""

    def generate_uncached_concepts(self, model, prefix, keys, *, temperature=1.0, top_k=None, start=0) -> Any:
        """Level by level, the prefix recomputed each level -> codes, logits, token_logits, tokens."""

    def generate_cached_concepts(
        self, model, prefix, keys, *, temperature=1.0, top_k=None, start=0, cache=None, namespace=""
    ) -> Any:
        """PC-1: prefix K/V once per generation (or from `cache` on an exact key), served to every level."""

    def make_concept_cache(self, max_bytes=...) -> Any:
        """An empty cross-request cache: lookup/store/save/load, hits, misses, nbytes."""

    def concept_schedule(self, model, prefix_length, mode) -> Any:
        """Declared positions per layer and row, forward by forward ('uncached', 'pc1', 'pc1_levels')."""

    def concept_kv_bytes(self, model) -> int:
        """K/V bytes (all layers) one cached position holds."""

    def concept_position_counts(self, model) -> list:
        """Instrumentation: per layer, positions processed since the last reset."""

    def reset_concept_counts(self, model) -> None:
        """Zero the position counters."""


class ConceptCodec(Protocol):
    """The codec's encoder side, for the codec's consistency (each level read with its own codebook)."""

    def codec_encode(self, model, tokens) -> Any:
        """tokens ``[B, T]`` -> (codes, the reconstruction the quantiser accumulated)."""

    def codec_reconstruction(self, model, codes) -> Any:
        """The cumulative reconstruction of the given levels' codes."""


class ConceptLevelCache(Protocol):
    """The named extension beyond PC-1: the earlier levels' K/V kept within a generation."""

    def generate_cached_levels(
        self, model, prefix, keys, *, temperature=1.0, top_k=None, start=0, cache=None, namespace=""
    ) -> Any:
        """PC-1 plus each level's K/V kept for the later levels."""


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The names a Protocol class asks a module for, in the order it declares them."""
    return tuple(
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    )


SPECULATIVE_NAMES = protocol_members(SpeculativeKernels)
NCM_NAMES = protocol_members(NCMModelAndCache)
MLX_LM_NAMES = protocol_members(Decoding)
LEVEL_DRAFT_NAMES = protocol_members(LevelDrafting)
TREE_NAMES = protocol_members(TreeVerification)
BLOCK_NAMES = protocol_members(BlockVerification)
TEXT_DRAFTING_NAMES = protocol_members(TextDrafting)
TREE_DRAFTING_NAMES = protocol_members(TreeDrafting)
SPECULATIVE_ROLLBACK_NAMES = protocol_members(SpeculativeRollback)
CONCEPT_NAMES = protocol_members(ConceptModels)
CONCEPT_CODEC_NAMES = protocol_members(ConceptCodec)
CONCEPT_LEVEL_CACHE_NAMES = protocol_members(ConceptLevelCache)
PROTOCOLS: tuple[type, ...] = (
    SpeculativeKernels,
    NCMModelAndCache,
    Decoding,
    LevelDrafting,
    TreeVerification,
    BlockVerification,
    TextDrafting,
    ConceptModels,
    ConceptCodec,
    ConceptLevelCache,
    TreeDrafting,
    SpeculativeRollback,
)
"""Every family of the protocol; a port may provide any of them, and a property lacking one is 'not provided'."""


def family_named(name: str) -> type | None:
    """The protocol family whose class is called `name`, in any case (`--require TreeVerification`); else None."""
    return next((family for family in PROTOCOLS if family.__name__.lower() == name.lower()), None)


PROTOCOL_NAMES = tuple(name for protocol in PROTOCOLS for name in protocol_members(protocol))


CAPABILITY_NAMES = {
    "traceable": "mx.compile traces verify_* (validate=False)",
    "apply": "apply_* take given uniforms",
    "value_error_contract": "invalid input raises a ValueError naming the argument",
}
"""What a property may need beyond protocol names (its ``needs`` marker); a module lacking one says why."""


def lacked_capabilities(module: ModuleType, needed) -> dict[str, str]:
    """Of the capabilities `needed`, those `module` declares it lacks: name -> its reason."""
    unknown = sorted(set(needed) - set(CAPABILITY_NAMES))
    if unknown:
        raise ValueError(f"needs: unknown capability {', '.join(unknown)} (known: {', '.join(CAPABILITY_NAMES)})")
    declared = getattr(module, "CAPABILITIES", None) or {}
    return {name: declared[name] for name in needed if isinstance(declared.get(name), str)}


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


def concept_api(module: ModuleType, names: tuple[str, ...] = CONCEPT_NAMES) -> ModuleType:
    """`module` checked to provide the source's NCM (`CONCEPT_NAMES`, or the family `names`)."""
    return require_names(module, names, "source NCM model", "the model-level properties (C1-C4)")
