"""Test-only builders around the level-drafting reference: drafts, exact tables, the greedy path.

None of this is part of the implementation under test: the properties and the benchmark build
their drafts here, tabulate a model's level distributions for the exact laws in
:mod:`ncm_verify.oracles.exact_levels`, and read the target's greedy path.
"""

from __future__ import annotations

import itertools
from types import ModuleType

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from ncm_verify.oracles.exact_levels import Context, LevelTables, softmax64
from ncm_verify.protocol import LEVEL_DRAFT_NAMES, NCM_NAMES, require_names
from ncm_verify.reference.ncm.generate import check_generation_inputs
from ncm_verify.reference.ncm.level_draft import level_distributions, sample_logits
from ncm_verify.reference.ncm.model import NCM, make_model
from ncm_verify.reference.speculative import select_code


def make_level_tables(model: NCM, prefix) -> LevelTables:
    """Every level's distributions after `prefix` ``[P]``, for every filling of the earlier levels."""
    config = model.config
    latent, tokens = {}, {}
    contexts: list[Context] = [()]
    for size in config.level_sizes:
        rows = [list(prefix) + [t for level in ctx for t in level] for ctx in contexts]
        latent_logits, token_logits = level_distributions(model, mx.array(rows, dtype=mx.int32))
        latent_rows, token_rows = softmax64(latent_logits), softmax64(token_logits)
        for index, ctx in enumerate(contexts):
            latent[ctx], tokens[ctx] = latent_rows[index], token_rows[index]
        fillings = list(itertools.product(range(config.vocab_size), repeat=size))
        contexts = [ctx + (filling,) for ctx in contexts for filling in fillings]
    return LevelTables(latent, tokens, config.level_sizes)


def generate_greedy_levels(model: NCM, prefix) -> tuple[list[mx.array], mx.array, list[mx.array]]:
    """The target's greedy level-by-level generation (uncached): argmax latent, then argmax tokens given it.

    Returns the tokens per level, the latents ``[B, L]`` and the logits each choice was made on
    (per level, latent then tokens given the chosen latent), so a caller can see near ties.
    """
    prefix, _ = check_generation_inputs(model, prefix, mx.random.key(0))
    sequence, latents, tokens, decisive = prefix, [], [], []
    for _ in model.config.level_sizes:
        latent_logits, code_logits = level_distributions(model, sequence)
        latent = sample_logits(latent_logits, None)
        chosen_logits = select_code(code_logits, latent)
        tokens.append(sample_logits(chosen_logits, None))
        latents.append(latent)
        decisive += [latent_logits, chosen_logits]
        sequence = mx.concatenate([sequence, tokens[-1]], axis=1)
    return tokens, mx.stack(latents, axis=1), decisive


def make_perturbed_model(model: NCM, scale: float, seed: int = 0) -> NCM:
    """A copy of `model` whose every weight moves by `scale` times its RMS times standard normal noise."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale >= 0:
        raise ValueError(f"scale: expected a number >= 0, got {scale!r}")
    copy = NCM(model.config)
    weights = tree_flatten(model.parameters())
    keys = mx.random.split(mx.random.key(seed), len(weights))
    moved = []
    for (name, value), noise_key in zip(weights, keys):
        wide = value.astype(mx.float32)
        rms = mx.sqrt(mx.mean(wide * wide))
        moved.append((name, (wide + scale * rms * mx.random.normal(value.shape, key=noise_key)).astype(value.dtype)))
    copy.update(tree_unflatten(moved))
    copy.eval()
    mx.eval(copy.parameters())
    return copy


def make_draft_model(target: NCM, relation: str, seed: int = 0) -> NCM:
    """A draft for `target`: ``"perturbed S"`` (weights moved by relative scale S) or ``"smaller"``
    (one layer of width 8, its own weights, the target's vocabulary, codebook and layout)."""
    if relation == "smaller":
        fields = {**target.config.to_dict(), "d_model": 8, "num_heads": 1, "num_layers": 1, "seed": seed}
        return make_model(type(target.config)(**fields))
    kind, _, scale = relation.partition(" ")
    if kind != "perturbed" or not scale:
        raise ValueError(f"relation: expected 'perturbed <scale>' or 'smaller', got {relation!r}")
    return make_perturbed_model(target, float(scale), seed)


def level_draft_api(module: ModuleType) -> ModuleType:
    """`module` checked to provide the NCM model and level drafting (`LEVEL_DRAFT_NAMES`)."""
    return require_names(module, NCM_NAMES + LEVEL_DRAFT_NAMES, "NCM level drafting", "the level-drafting properties")
