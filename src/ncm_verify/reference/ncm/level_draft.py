"""Speculative drafting of whole NCM levels: a draft NCM proposes k levels, one target pass verifies them.

A round starts at the first level not yet emitted. The draft samples k levels
(latent, then tokens given it) level by level, recording its distributions. One
target pass reads every drafted level the way level-by-level generation reads it:
each level's placeholder slots attend to the prefix, the earlier levels' tokens and
themselves, never to later levels or to another level's placeholders. The latent
chain then decides level by level through the implementation's
``verify_latent_chain``: the first level whose latent or a token changed ends the
round (later drafts are dropped); when every drafted level stands, the pass's extra
block gives a bonus level drawn from the target. K/V of accepted levels are kept,
K/V of rejected ones never survive.

Rows of a batch advance at their own pace: rows at the same level form a cohort
that runs batched. Every random draw of a row comes from that row's key, split by
round start and purpose, so a row's output does not depend on its batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import NamedTuple

import mlx.core as mx
import numpy as np

from ncm_verify.reference import speculative
from ncm_verify.reference.ncm.cache import PrefixCache, require_reusable
from ncm_verify.reference.ncm.generate import check_generation_inputs, prefix_kv
from ncm_verify.reference.ncm.masks import segment_indices
from ncm_verify.reference.ncm.model import KV, NCM
from ncm_verify.reference.speculative import make_uniforms, select_code

__all__ = [
    "level_distributions",
    "verify_drafted_levels",
    "sample_logits",
    "Steps",
    "REFERENCE_STEPS",
    "Cohort",
    "LevelDraftGeneration",
    "Round",
    "generate_level_speculative",
]

# --- model readings ------------------------------------------------------------------


def _check_level_causal(name: str, model: NCM) -> None:
    """No row attends to a later level's rows: a level's tokens then read the same at every stage."""
    config = model.config
    segment = segment_indices(config.prefix_length, config.level_sizes)
    later = segment[None, :] > segment[:, None]
    if (np.asarray(model.mask) & later).any():
        raise ValueError(
            f"{name}: mask {config.mask!r} lets a level attend to later levels; "
            "drafted levels cannot be verified in one pass"
        )


def _check_draft(target: NCM, draft: NCM) -> None:
    """The draft shares the target's vocabulary, codebook, prefix length and level sizes."""
    for field in ("vocab_size", "codebook_size", "prefix_length", "level_sizes"):
        mine, theirs = getattr(draft.config, field), getattr(target.config, field)
        if mine != theirs:
            raise ValueError(f"draft: {field} {mine!r} differs from the target's {theirs!r}")


def _run_rows(
    model: NCM, tokens: mx.array, positions: mx.array, mask: mx.array, cache: list[KV] | None
) -> tuple[mx.array, list[KV]]:
    """The model on rows at arbitrary layout `positions` under an explicit ``[rows, cached + rows]`` mask."""
    x = model.embed(tokens) + model.positions(positions)
    kvs = []
    for index, layer in enumerate(model.layers):
        x, kv = layer(x, mask, None if cache is None else cache[index])
        kvs.append(kv)
    return model.norm(x), kvs


def _all_code_token_logits(model: NCM, slots: mx.array) -> mx.array:
    """Token logits given every code at once: ``[B, n, d] -> [B, K, n, V]``."""
    return model.token_head(slots[:, None] + model.codebook.weight[None, :, None, :])


def level_distributions(model: NCM, sequence: mx.array) -> tuple[mx.array, mx.array]:
    """Level-by-level reading of the next level after `sequence` (prefix and whole earlier levels).

    Returns its latent logits ``[B, K]`` and token logits for every code ``[B, K, n, V]``,
    from an uncached run over the sequence and the level's placeholder slots.
    """
    config = model.config
    level = (
        int(np.searchsorted(np.cumsum([config.prefix_length, *config.level_sizes]), sequence.shape[1], side="right"))
        - 1
    )
    if sequence.shape[1] != config.level_start(level) or level >= len(config.level_sizes):
        raise ValueError(f"sequence: length {sequence.shape[1]} does not end at a level boundary before the last level")
    size = config.level_sizes[level]
    slots = mx.full((sequence.shape[0], size), config.placeholder, dtype=mx.int32)
    hidden, _ = model(mx.concatenate([sequence.astype(mx.int32), slots], axis=1))
    return model.latent_logits(hidden[:, -size:]), _all_code_token_logits(model, hidden[:, -size:])


def _verification_layout(config, covered: int, level: int, num_levels: int, context_levels: int):
    """Positions, segments and placeholder flags of a verification pass's rows.

    Token rows: layout rows ``covered .. start(level + context_levels)``; then one
    placeholder block per level ``level .. level + num_levels - 1``.
    """
    segment = segment_indices(config.prefix_length, config.level_sizes)
    token_positions = np.arange(covered, config.level_start(level + context_levels))
    blocks = [
        np.arange(config.level_start(lv), config.level_start(lv) + config.level_sizes[lv])
        for lv in range(level, level + num_levels)
    ]
    positions = np.concatenate([token_positions, *blocks])
    placeholder = np.concatenate([np.zeros(len(token_positions), bool), *[np.ones(len(b), bool) for b in blocks]])
    return positions, segment[positions], placeholder


def _make_verification_mask(model: NCM, covered: int, positions, segments, placeholder) -> mx.array:
    """``[rows, covered + rows]``: the model's mask between layout positions, with two limits.

    A placeholder block sees token rows of earlier levels only and no other block;
    token rows never see a placeholder.
    """
    base = np.asarray(model.mask)
    columns = np.concatenate([np.arange(covered), positions])
    column_segment = np.concatenate(
        [segment_indices(model.config.prefix_length, model.config.level_sizes)[:covered], segments]
    )
    column_placeholder = np.concatenate([np.zeros(covered, bool), placeholder])
    allowed = base[np.ix_(positions, columns)].copy()
    row_block, column_block = placeholder[:, None], column_placeholder[None, :]
    allowed &= ~(~row_block & column_block)
    allowed &= ~(row_block & ~column_block & (column_segment[None, :] >= segments[:, None]))
    allowed &= ~(row_block & column_block & (column_segment[None, :] != segments[:, None]))
    return mx.array(allowed)


def _level_heads(model: NCM, slots: mx.array) -> tuple[mx.array, mx.array]:
    """A level's latent logits ``[B, K]`` and token logits for every code ``[B, K, n, V]`` from its slot states."""
    return model.latent_logits(slots), _all_code_token_logits(model, slots)


def _on_distinct_rows(compute: Callable, rows: mx.array) -> list[mx.array]:
    """`compute` on the distinct rows of `rows` only, each output gathered back to every row.

    Only for passes that read no K/V: a row's result is then a function of its tokens alone.
    """
    values = np.array(rows).astype(np.int64)
    base = int(values.max(initial=0)) + 1
    if values.shape[1] * np.log2(base) < 62:  # one mixed-radix integer per row: a 1-D unique, far faster
        codes = values @ (base ** np.arange(values.shape[1] - 1, -1, -1, dtype=np.int64))
        _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        distinct = values[first]
    else:
        distinct, inverse = np.unique(values, axis=0, return_inverse=True)
    index = mx.array(inverse.reshape(-1).astype(np.int32))
    return [output[index] for output in compute(mx.array(distinct.astype(np.int32)))]


def _check_pass_inputs(config, kv, covered, tokens, drafted, level, bonus) -> None:
    """A ValueError naming the first argument of a verification pass that does not fit the layout."""
    levels = len(config.level_sizes)
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level < levels:
        raise ValueError(f"level: expected an integer in [0, {levels}), got {level!r}")
    if not drafted or level + len(drafted) + int(bool(bonus)) > levels:
        raise ValueError(
            f"drafted: {len(drafted)} drafted levels (bonus {bool(bonus)}) do not fit after level {level} of {levels}"
        )
    boundaries = [config.level_start(j) for j in range(level + 1)]
    if (kv is None and covered != 0) or (
        kv is not None and (covered not in boundaries or any(k.shape[2] != covered for k, _ in kv))
    ):
        raise ValueError(
            f"covered: expected 0 without K/V, or a level boundary in {boundaries} that the K/V hold; got {covered!r}"
        )
    if not isinstance(tokens, mx.array) or tokens.ndim != 2 or tokens.shape[1] != config.level_start(level):
        raise ValueError(f"tokens: expected shape [B, {config.level_start(level)}] (prefix and levels before {level})")
    for j, level_tokens in enumerate(drafted):
        expected = (tokens.shape[0], config.level_sizes[level + j])
        if (
            not isinstance(level_tokens, mx.array)
            or tuple(level_tokens.shape) != expected
            or not mx.issubdtype(level_tokens.dtype, mx.integer)
        ):
            raise ValueError(f"drafted: level {level + j} expected integer ids of shape {expected}")


def verify_drafted_levels(
    target: NCM, kv: list[KV] | None, covered: int, tokens: mx.array, drafted: list[mx.array], level: int, bonus: bool
):
    """One target pass over drafted levels ``level .. level + len(drafted) - 1`` (and a bonus block).

    Args:
        target: the target NCM (a level-causal mask).
        kv: per-layer K/V of layout rows ``< covered``; None (with `covered` 0) for a pass from scratch,
            which runs only the distinct rows of the batch and keeps no K/V.
        tokens: ``[B, start(level)]`` every token emitted so far, prefix included.
        drafted: per drafted level, its tokens ``[B, n_l]``.
        bonus: also read the level after the last drafted one.

    Returns:
        Per verified level its latent logits ``[B, K]``, per level its token logits for
        every code ``[B, K, n, V]``, and the K/V of the token rows (cached rows first; None from scratch).
    """
    config = target.config
    _check_pass_inputs(config, kv, covered, tokens, drafted, level, bonus)
    num_levels = len(drafted) + int(bonus)
    context = drafted if bonus else drafted[:-1]
    positions, segments, placeholder = _verification_layout(config, covered, level, num_levels, len(context))
    token_rows = int((~placeholder).sum())
    mask = _make_verification_mask(target, covered, positions, segments, placeholder)
    rows = mx.concatenate([tokens[:, covered:], *context], axis=1).astype(mx.int32)

    def run(rows: mx.array, cache):
        blocks = [
            mx.full((rows.shape[0], config.level_sizes[lv]), config.placeholder, dtype=mx.int32)
            for lv in range(level, level + num_levels)
        ]
        hidden, kvs = _run_rows(target, mx.concatenate([rows, *blocks], axis=1), mx.array(positions), mask, cache)
        bounds = np.cumsum([token_rows, *config.level_sizes[level : level + num_levels]])
        heads = [_level_heads(target, hidden[:, begin:end]) for begin, end in zip(bounds[:-1], bounds[1:])]
        return [head[0] for head in heads] + [head[1] for head in heads], kvs

    if kv is None:
        outputs = _on_distinct_rows(lambda distinct: run(distinct, None)[0], rows)
        return outputs[:num_levels], outputs[num_levels:], None
    outputs, kvs = run(rows, kv)
    kept = covered + token_rows
    return outputs[:num_levels], outputs[num_levels:], [(k[:, :, :kept], v[:, :, :kept]) for k, v in kvs]


# --- sampling --------------------------------------------------------------------------


def sample_logits(logits: mx.array, keys: mx.array | None) -> mx.array:
    """Gumbel-max draw in float32 over the last axis, one key per row (argmax when `keys` is None)."""
    logits = logits.astype(mx.float32)
    if keys is None:
        return mx.argmax(logits, axis=-1).astype(mx.int32)
    uniforms = make_uniforms(keys, logits.shape[1:])
    return mx.argmax(logits - mx.log(-mx.log(uniforms)), axis=-1).astype(mx.int32)


def _row_keys(keys: mx.array, count: int) -> mx.array:
    """``[B, count, 2]``: each row's key split `count` ways."""
    return mx.vmap(lambda key: mx.random.split(key, count))(keys)


DRAFT_LATENT, DRAFT_TOKENS, VERIFY = range(3)
"""What a round's key is split for, per level offset (the bonus level takes offset L)."""


def _key_for(keys: mx.array | None, offset: int, purpose: int) -> mx.array | None:
    """Each row's key for one `purpose` at level `offset` of a round (None in greedy mode)."""
    return None if keys is None else keys[:, 3 * offset + purpose]


def _probs_of(logits: mx.array) -> mx.array:
    return mx.softmax(logits.astype(mx.float32), axis=-1)


def _level_acceptance(p_latent, q_latent, p_tokens, q_tokens) -> mx.array:
    """Exact probability that a drafted level stands: ``sum_z min(p, q) prod_i sum_x min(p_i, q_i)``."""
    token_factor = mx.prod(mx.minimum(p_tokens, q_tokens).sum(axis=-1), axis=-1)
    return (mx.minimum(p_latent, q_latent) * token_factor).sum(axis=-1)


# --- the decisions a planted bug may swap ----------------------------------------------------


def _same_latent(latent: mx.array, codes: int) -> mx.array:
    """Tokens are drafted under the latent the draft sampled."""
    return latent


def _every_code_rows(token_probs: mx.array, draft_latent: mx.array) -> mx.array:
    """The target's token rows for every code: a corrected latent gets its own rows."""
    return token_probs


def _accepted_levels_survive(accepted: np.ndarray, emitted: np.ndarray) -> np.ndarray:
    """Only fully accepted levels keep their K/V; a changed level's rows are recomputed from its tokens."""
    return accepted


class Steps(NamedTuple):
    """Decisions of level drafting: ``token_latent(latent, K)``, ``target_token_rows(probs [B, K, n, V],
    draft_latent)`` and ``surviving_levels(accepted [B], emitted [B])``."""

    token_latent: Callable
    target_token_rows: Callable
    surviving_levels: Callable


REFERENCE_STEPS = Steps(_same_latent, _every_code_rows, _accepted_levels_survive)


# --- generation --------------------------------------------------------------------------


@dataclasses.dataclass
class Cohort:
    """Rows at the same next level, with each model's K/V of layout rows below its `covered`."""

    rows: np.ndarray
    level: int
    tokens: mx.array
    target_kv: list[KV] | None
    target_covered: int
    draft_kv: list[KV] | None
    draft_covered: int


@dataclasses.dataclass
class LevelDraftGeneration:
    """Outcome and cost of speculative level drafting.

    Attributes:
        tokens: per level, ``[B, n_l]`` int32.
        latents: ``[B, L]`` int32.
        target_passes: ``[B]`` target passes (rounds) each row took.
        accepted_levels: ``[B]`` drafted levels that stood.
        verified_levels: ``[B]`` drafted levels the chain decided on.
        predicted_accepted: ``[B]`` sum of the exact acceptance probabilities of the verified levels.
        final_states: per finishing cohort ``(rows, target_covered, target_kv, draft_covered, draft_kv)``.
        positions: per layer, target positions processed.
    """

    tokens: list[mx.array]
    latents: mx.array
    target_passes: np.ndarray
    accepted_levels: np.ndarray
    verified_levels: np.ndarray
    predicted_accepted: np.ndarray
    final_states: list
    positions: list[int]


@dataclasses.dataclass
class Round:
    """What one round decided for each row of a cohort.

    ``decided`` holds per emitted level offset ``(latent [b], tokens [b, n], stood [b])``;
    ``accepted`` counts the drafted levels that stood, ``emitted`` the levels emitted
    (a changed level or the bonus included), ``verified`` the drafted levels decided on,
    ``predicted`` the sum of their exact acceptance probabilities.
    """

    decided: list
    count: int
    accepted: np.ndarray
    emitted: np.ndarray
    verified: np.ndarray
    predicted: np.ndarray
    target_kv: list[KV] | None
    draft_kv: list[KV] | None
    draft_covered: int


def _trim_kv(kv: list[KV] | None, rows: int) -> list[KV] | None:
    return None if kv is None else [(k[:, :, :rows], v[:, :, :rows]) for k, v in kv]


def _take_kv(kv: list[KV] | None, index: mx.array) -> list[KV] | None:
    return None if kv is None else [(k[index], v[index]) for k, v in kv]


def _draft_levels(draft: NCM, cohort: Cohort, count: int, keys: mx.array | None, steps: Steps, recompute: bool):
    """Sample `count` levels from the draft, level by level; returns tokens, latents, distributions, K/V."""
    config = draft.config
    kv, covered, context = cohort.draft_kv, cohort.draft_covered, [cohort.tokens]
    latents, tokens, latent_probs, token_probs = [], [], [], []
    for j in range(count):
        level, size = cohort.level + j, config.level_sizes[cohort.level + j]
        slots = mx.full((len(cohort.rows), size), config.placeholder, dtype=mx.int32)
        sequence = mx.concatenate([*context, slots], axis=1)
        if recompute:  # from scratch: only distinct rows run, and no K/V is kept
            latent_logits, code_logits = _on_distinct_rows(
                lambda distinct, size=size: _level_heads(draft, draft(distinct)[0][:, -size:]), sequence
            )
        else:
            hidden, kv = draft(sequence[:, covered:], covered, cache=kv)
            kv, covered = _trim_kv(kv, config.level_start(level)), config.level_start(level)
            latent_logits, code_logits = _level_heads(draft, hidden[:, -size:])
        latent = sample_logits(latent_logits, _key_for(keys, j, DRAFT_LATENT))
        under = steps.token_latent(latent, config.codebook_size)
        level_tokens = sample_logits(select_code(code_logits, under), _key_for(keys, j, DRAFT_TOKENS))
        latents.append(latent)
        tokens.append(level_tokens)
        latent_probs.append(_probs_of(latent_logits))
        token_probs.append(_probs_of(code_logits))
        context.append(level_tokens)
    return tokens, latents, latent_probs, token_probs, kv, covered


def _verify_level(
    kernels: ModuleType,
    p_latent_logits,
    p_token_logits,
    q_latent,
    q_tokens,
    latent,
    tokens,
    key: mx.array | None,
    steps: Steps,
):
    """One level's decision through the implementation: (latent, tokens, stood [B])."""
    if key is None:  # greedy: the latent, then every slot, as one-draft chains against the target's argmax
        both = mx.stack([p_latent_logits, p_latent_logits], axis=1)
        chosen = kernels.verify_greedy(both, latent[:, None])
        final_latent, latent_stood = chosen.tokens[:, 0], chosen.num_accepted > 0
        rows = select_code(p_token_logits, final_latent)
        flat = rows.reshape(-1, 1, rows.shape[-1])
        slot = kernels.verify_greedy(mx.concatenate([flat, flat], axis=1), tokens.reshape(-1, 1))
        final_tokens = slot.tokens[:, 0].reshape(tokens.shape)
        stood = latent_stood & mx.all((slot.num_accepted > 0).reshape(tokens.shape), axis=1)
        return final_latent, final_tokens, stood
    p_latent, p_tokens = _probs_of(p_latent_logits), _probs_of(p_token_logits)
    outcome = kernels.verify_latent_chain(
        p_latent, q_latent, latent, steps.target_token_rows(p_tokens, latent), q_tokens, tokens, key=key
    )
    stood = outcome.latent_accepted & mx.all(outcome.accepted, axis=1)
    return outcome.latent, outcome.tokens, stood


def _run_round(
    target: NCM,
    draft: NCM,
    cohort: Cohort,
    num_draft: int,
    keys: mx.array | None,
    kernels: ModuleType,
    steps: Steps,
    recompute: bool,
) -> Round:
    """Draft, verify in one target pass, decide level by level."""
    config = target.config
    levels = len(config.level_sizes)
    count = min(num_draft, levels - cohort.level)
    bonus = cohort.level + count < levels
    drafted, latents, q_latent, q_tokens, draft_kv, draft_covered = _draft_levels(
        draft, cohort, count, keys, steps, recompute
    )
    p_latent, p_tokens, target_kv = verify_drafted_levels(
        target, cohort.target_kv, cohort.target_covered, cohort.tokens, drafted, cohort.level, bonus
    )
    decided = [
        _verify_level(
            kernels,
            p_latent[j],
            p_tokens[j],
            q_latent[j],
            q_tokens[j],
            latents[j],
            drafted[j],
            _key_for(keys, j, VERIFY),
            steps,
        )
        for j in range(count)
    ]
    alphas = [
        _level_acceptance(_probs_of(p_latent[j]), q_latent[j], _probs_of(p_tokens[j]), q_tokens[j])
        for j in range(count)
    ]
    if bonus:
        # the bonus level's draws use an offset past every drafted level's
        bonus_latent = sample_logits(p_latent[-1], _key_for(keys, levels, DRAFT_LATENT))
        bonus_tokens = sample_logits(select_code(p_tokens[-1], bonus_latent), _key_for(keys, levels, DRAFT_TOKENS))
        decided.append((bonus_latent, bonus_tokens, mx.zeros(bonus_latent.shape, dtype=mx.bool_)))
    mx.eval(decided, alphas)  # one evaluation for the round, not one per conversion below
    stood = np.stack([np.array(d[2]) for d in decided[:count]], axis=1)
    accepted = np.cumprod(stood, axis=1).sum(axis=1)
    emitted = np.where(accepted < count, accepted + 1, count + int(bonus))
    alpha = np.stack([np.array(a) for a in alphas], axis=1)
    verified = np.minimum(accepted + 1, count)
    predicted = np.where(np.arange(count)[None] < verified[:, None], alpha, 0.0).sum(axis=1)
    return Round(decided, count, accepted, emitted, verified, predicted, target_kv, draft_kv, draft_covered)


def _split_cohort(config, cohort: Cohort, result: Round, steps: Steps, recompute: bool) -> list[Cohort]:
    """The cohort's rows regrouped by levels emitted and levels whose K/V survive."""
    decided, emitted = result.decided, result.emitted
    surviving = np.minimum(steps.surviving_levels(result.accepted, emitted), result.count)
    following = []
    for value, kept in sorted(set(zip(emitted.tolist(), surviving.tolist()))):
        members = np.flatnonzero((emitted == value) & (surviving == kept))
        index = mx.array(members)
        tokens = mx.concatenate([cohort.tokens[index]] + [decided[j][1][index] for j in range(value)], axis=1)
        level = cohort.level + value
        if recompute:
            following.append(Cohort(cohort.rows[members], level, tokens, None, 0, None, 0))
            continue
        # only K/V rows that exist survive: the pass's token rows, the draft's levels below its last draft
        target_kv = result.target_kv
        target_rows = min(config.level_start(cohort.level + kept), target_kv[0][0].shape[2])
        draft_rows = min(config.level_start(cohort.level + kept), result.draft_covered)
        following.append(
            Cohort(
                cohort.rows[members],
                level,
                tokens,
                _trim_kv(_take_kv(target_kv, index), target_rows),
                target_rows,
                _trim_kv(_take_kv(result.draft_kv, index), draft_rows),
                draft_rows,
            )
        )
    return following


def generate_level_speculative(
    target: NCM,
    draft: NCM,
    prefix,
    key,
    *,
    num_draft: int = 2,
    cache: PrefixCache | None = None,
    namespace: str = "",
    recompute: bool = False,
    kernels: ModuleType = speculative,
    steps: Steps = REFERENCE_STEPS,
) -> LevelDraftGeneration:
    """Generate every level of `target` by drafting `num_draft` levels with `draft` per target pass.

    Args:
        target: the NCM whose level-by-level law (or greedy generation) the output follows.
        draft: an NCM sharing vocabulary, codebook, prefix length and level sizes.
        prefix: token ids ``[B, P]``.
        key: one ``mx.random.key`` (split per row) or one per row ``[B, 2]``; None for greedy generation.
        num_draft: levels drafted per round (fewer when fewer remain).
        cache: a `PrefixCache` serving both models' prefix K/V.
        namespace: separates tenants in the cache key.
        recompute: keep no K/V at all; every pass reruns all rows (the reference for K/V reuse).
        kernels: the implementation providing ``verify_latent_chain`` and ``verify_greedy``.
    """
    _check_draft(target, draft)
    _check_level_causal("target", target)
    _check_level_causal("draft", draft)
    if isinstance(num_draft, bool) or not isinstance(num_draft, int) or num_draft < 1:
        raise ValueError(f"num_draft: expected an integer >= 1, got {num_draft!r}")
    config = target.config
    levels = len(config.level_sizes)
    prefix, keys = check_generation_inputs(target, prefix, mx.random.key(0) if key is None else key)
    round_keys = None if key is None else _row_keys(keys, levels)
    batch = prefix.shape[0]
    target.reset_counts()
    if recompute:
        start = Cohort(np.arange(batch), 0, prefix, None, 0, None, 0)
    else:
        require_reusable(target)
        require_reusable(draft)
        target_kv, _ = prefix_kv(target, prefix, cache, namespace)
        draft_kv, _ = prefix_kv(draft, prefix, cache, namespace)
        start = Cohort(np.arange(batch), 0, prefix, target_kv, config.prefix_length, draft_kv, config.prefix_length)
    latents = np.zeros((batch, levels), dtype=np.int32)
    tokens = [np.zeros((batch, n), dtype=np.int32) for n in config.level_sizes]
    passes, accepted, verified = (np.zeros(batch, dtype=np.int64) for _ in range(3))
    predicted = np.zeros(batch)
    frontier, finished = [start], []
    while frontier:
        cohort = frontier.pop()
        keys_here = (
            None if round_keys is None else _row_keys(round_keys[mx.array(cohort.rows), cohort.level], 3 * (levels + 1))
        )
        result = _run_round(target, draft, cohort, num_draft, keys_here, kernels, steps, recompute)
        rows = cohort.rows
        passes[rows] += 1
        accepted[rows] += result.accepted
        verified[rows] += result.verified
        predicted[rows] += result.predicted
        for j, (latent, level_tokens, _) in enumerate(result.decided):
            here = result.emitted > j
            latents[rows[here], cohort.level + j] = np.array(latent)[here]
            tokens[cohort.level + j][rows[here]] = np.array(level_tokens)[here]
        for following in _split_cohort(config, cohort, result, steps, recompute):
            if following.level == levels:
                finished.append(
                    (
                        following.rows,
                        following.target_covered,
                        following.target_kv,
                        following.draft_covered,
                        following.draft_kv,
                    )
                )
            else:
                frontier.append(following)
    return LevelDraftGeneration(
        [mx.array(t) for t in tokens],
        mx.array(latents),
        passes,
        accepted,
        verified,
        predicted,
        finished,
        target.position_counts(),
    )
