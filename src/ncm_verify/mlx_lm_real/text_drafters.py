"""Tiny seeded text drafters (test-only), and the call-by-call check of a drafting loop that uses them.

`ARDrafter` drafts with an mlx-lm model one token at a time; `BlockDrafter` is an NCM-style block
drafter: from the context it samples a code z, then proposes k tokens factorised given z, q(x | z) =
prod_i q_i(x_i | z), in one forward over k placeholder slots (which it leaves in its cache for the loop to
trim), optionally reading the target's hidden state. The "concept" kinds are the reference's own NCM block
drafter (`ConceptBlockDrafter`: the source's NCM, codes level by level, rows from the codec's decode) at a tiny
seeded size, with and without the target's features. All are pure functions of their seeds. The trained
drafters (the NCM and concept drafters) implement the same `TextDrafter` face.

`check_drafted_calls` judges a loop from what it handed the drafter and `verify_chain`, exactly: each
call's p rows are the target's uncached conditionals of what was emitted before, its q rows the very rows
the drafter's last proposal drew its tokens from (recomputed uncached under its codes), its features the
target's uncached hidden state, and the loop emits what `verify_chain` decided.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from functools import partial
from typing import NamedTuple

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from ncm_verify.harness.checks import as_numpy, assert_close, assert_equal
from ncm_verify.mlx_lm_real.models import TinySpec, logprobs_at_every_position, make_tiny_model
from ncm_verify.oracles import exact_text_drafting
from ncm_verify.reference.drafting import ConceptBlockDrafter, ConceptDrafterConfig, DraftBlock
from ncm_verify.reference.drafting.base import rows_at_temperature, softmax_rows
from ncm_verify.reference.drafting.loop import target_pass
from ncm_verify.reference.ncm.concept_config import ConceptConfig

DRAFTER_KINDS = ("autoregressive", "block", "block reading features", "concept", "concept reading features")
"""The test drafters the properties draw."""


scaled_softmax = rows_at_temperature
"""The rows a loop draws from at a temperature (one function for every loop and drafter)."""


class ARDrafter:
    """An autoregressive `TextDrafter` over an mlx-lm model: k forward passes per block."""

    reads_features = False

    def __init__(self, model, max_block: int = 8):
        self.model, self.vocab_size, self.max_block = model, model.args.vocab_size, max_block

    def make_cache(self) -> list:
        return make_prompt_cache(self.model)

    def propose(self, cache, new_tokens, k, key, *, temperature=1.0, features=None) -> DraftBlock:
        logits = self.model(new_tokens, cache=cache)[:, -1]
        tokens, rows = [], []
        for i, step_key in enumerate(mx.random.split(key, k)):
            scores = logits.astype(mx.float32) * (1.0 / temperature)
            token = mx.random.categorical(scores, key=step_key)
            tokens.append(token)
            rows.append(softmax_rows(scores))
            if i < k - 1:
                logits = self.model(token[:, None], cache=cache)[:, -1]
        return DraftBlock(tokens=mx.stack(tokens, axis=1).astype(mx.int32), probs=mx.stack(rows, axis=1))

    def block_probs(self, context, tokens, codes=None, *, temperature=1.0, features=None) -> mx.array:
        k = tokens.shape[1]
        sequence = mx.concatenate([context, tokens[:, :-1]], axis=1).astype(mx.int32)
        return scaled_softmax(self.model(sequence)[:, -k:], temperature)


@dataclasses.dataclass(frozen=True)
class BlockSpec:
    """A tiny NCM-style block drafter: `num_codes` values of one code z, `max_block` factorised rows."""

    vocab_size: int = 8
    seed: int = 0
    num_codes: int = 3
    max_block: int = 4
    feature_size: int = 0
    hidden_size: int = 16
    logit_scale: float = 2.0


class BlockDrafter:
    """An NCM-style block `TextDrafter`: z ~ q(z | context), then k tokens from q_i(. | z, context) at once.

    Its backbone is an mlx-lm llama over the vocabulary and one placeholder id; the block's k slots are
    placeholders after the context, read in the same forward pass as the new tokens.
    """

    def __init__(self, spec: BlockSpec):
        self.spec, self.vocab_size, self.max_block = spec, spec.vocab_size, spec.max_block
        self.reads_features = spec.feature_size > 0
        self.placeholder = spec.vocab_size
        self.backbone = make_tiny_model(
            TinySpec(vocab_size=spec.vocab_size + 1, seed=spec.seed, hidden_size=spec.hidden_size, num_layers=1)
        )
        keys = mx.random.split(mx.random.key(spec.seed + 7919), 4)
        h, scale = spec.hidden_size, spec.logit_scale / math.sqrt(spec.hidden_size)
        self.heads = scale * mx.random.normal((spec.max_block, h, spec.vocab_size), key=keys[0])
        self.code_embeddings = mx.random.normal((spec.num_codes, h), key=keys[1])
        self.code_head = scale * mx.random.normal((h, spec.num_codes), key=keys[2])
        self.feature_map = mx.random.normal((max(spec.feature_size, 1), h), key=keys[3]) / math.sqrt(
            max(spec.feature_size, 1)
        )
        mx.eval(self.heads, self.code_embeddings, self.code_head, self.feature_map)

    def make_cache(self) -> list:
        return make_prompt_cache(self.backbone)

    def _states(self, tokens: mx.array, cache, k: int, features) -> tuple[mx.array, mx.array]:
        """Hidden states of the last context token ``[B, H]`` and of the k slots ``[B, k, H]``."""
        slots = mx.full((tokens.shape[0], k), self.placeholder, dtype=mx.int32)
        states = self.backbone.model(mx.concatenate([tokens.astype(mx.int32), slots], axis=1), cache)
        if self.reads_features:
            if features is None:
                raise ValueError("features: this drafter reads the target's hidden state; got None")
            states = states + (features.astype(mx.float32) @ self.feature_map)[:, None]
        return states[:, -k - 1], states[:, -k:]

    def _rows(self, slots: mx.array, codes: mx.array, temperature: float) -> mx.array:
        k = slots.shape[1]
        conditioned = slots + self.code_embeddings[codes[:, 0]][:, None]
        logits = mx.einsum("bkh,khv->bkv", conditioned, self.heads[:k])
        return scaled_softmax(logits, temperature)

    def propose(self, cache, new_tokens, k, key, *, temperature=1.0, features=None) -> DraftBlock:
        last, slots = self._states(new_tokens, cache, k, features)
        code_key, token_key = mx.random.split(key)
        codes = mx.random.categorical(last @ self.code_head, key=code_key)[:, None].astype(mx.int32)
        rows = self._rows(slots, codes, temperature)
        tokens = mx.random.categorical(mx.log(rows), key=token_key).astype(mx.int32)
        return DraftBlock(tokens=tokens, probs=rows, codes=codes)

    def block_probs(self, context, tokens, codes, *, temperature=1.0, features=None) -> mx.array:
        _, slots = self._states(context, None, tokens.shape[1], features)
        return self._rows(slots, codes, temperature)

    def code_law(self, context: mx.array, *, features=None) -> mx.array:
        """q(z | context) ``[B, num_codes]``."""
        last, _ = self._states(context, None, 1, features)
        return mx.softmax(last @ self.code_head, axis=-1)

    @property
    def num_codes(self) -> int:
        return self.spec.num_codes

    def all_codes(self) -> mx.array:
        return mx.arange(self.spec.num_codes, dtype=mx.int32)[:, None]

    def block_law(self, context: mx.array, k: int, *, temperature=1.0, features=None) -> tuple[mx.array, mx.array]:
        """log q(z | context) ``[B, num_codes]`` and the log rows under each z ``[B, num_codes, k, V]``."""
        _, slots = self._states(context, None, k, features)
        law = self.code_law(context, features=features)
        codes = [mx.full((context.shape[0], 1), z, dtype=mx.int32) for z in range(self.spec.num_codes)]
        rows = mx.stack([self._rows(slots, c, temperature) for c in codes], axis=1)
        return mx.log(law), mx.log(rows)

    def marginal_probs(self, context: mx.array, k: int, *, temperature=1.0, features=None) -> mx.array:
        """The latent marginal sum_z q(z) q_i(. | z) ``[B, k, V]``: not what the tokens were drawn from."""
        _, slots = self._states(context, None, k, features)
        law = self.code_law(context, features=features)
        codes = [mx.full((context.shape[0], 1), z, dtype=mx.int32) for z in range(self.spec.num_codes)]
        rows = [law[:, z, None, None] * self._rows(slots, c, temperature) for z, c in enumerate(codes)]
        return mx.sum(mx.stack(rows), axis=0)


def make_drafter(kind: str, target_spec: TinySpec, seed: int, *, logit_scale: float | None = None, max_block: int = 4):
    """A test drafter of `kind` (`DRAFTER_KINDS`) over `target_spec`'s vocabulary.

    The autoregressive one is the target's architecture with other weights, or with `logit_scale` the
    target's own weights under a scaled head (a draft close to the target). `max_block` bounds a block
    drafter's k.
    """
    if kind == "autoregressive":
        spec = (
            target_spec.with_seed(seed)
            if logit_scale is None
            else dataclasses.replace(target_spec, logit_scale=logit_scale)
        )
        return ARDrafter(make_tiny_model(spec))
    if kind not in DRAFTER_KINDS:
        raise ValueError(f"kind: expected one of {DRAFTER_KINDS}, got {kind!r}")
    features = target_spec.hidden_size if kind.endswith("reading features") else 0
    if kind.startswith("concept"):
        return ConceptBlockDrafter(tiny_concept_config(target_spec.vocab_size, seed, features, max_block))
    return BlockDrafter(
        BlockSpec(vocab_size=target_spec.vocab_size, seed=seed, feature_size=features, max_block=max_block)
    )


def tiny_concept_config(vocab_size: int, seed: int, feature_dim: int = 0, max_block: int = 4) -> ConceptDrafterConfig:
    """The reference NCM drafter at a tiny size: levels of 1 and 2 positions, 2 codes each (z takes 8 values:
    the enumerated law stays cheap), a prefix of the last 6 tokens."""
    concept = ConceptConfig(
        vocab_size=vocab_size,
        sequence_length=max_block,
        level_lengths=(1, 2),
        codebook_sizes=(2, 2),
        prefix_length=6,
        codec_dim=8,
        d_model=16,
        num_heads=2,
        num_layers=1,
        seed=seed,
        codec_seed=seed + 1,
    )
    return ConceptDrafterConfig(concept, context=6, feature_dim=feature_dim)


def target_features(target, context: list[int]) -> mx.array:
    """The target's uncached last hidden state at the position whose row emits `context`'s last token."""
    _, states = target_pass(target, mx.array([context[:-1]], dtype=mx.int32), None, hidden=True)
    if states is None:
        raise ValueError("target: gave no hidden states")
    return states[:, -1]


class RecordingDrafter:
    """A drafter that logs each proposal (what it was handed and what it returned) into `calls`."""

    def __init__(self, drafter, calls: list):
        self.drafter, self.calls = drafter, calls

    def propose(self, cache, new_tokens, k, key, *, temperature=1.0, features=None):
        held = cache[0].offset if cache else 0
        block = self.drafter.propose(cache, new_tokens, k, key, temperature=temperature, features=features)
        record = {"new_tokens": new_tokens, "features": features, "block": block, "held": held, "key": key}
        self.calls.append(("propose", record))
        return block

    def __getattr__(self, name):
        if name == "drafter":
            raise AttributeError(name)
        return getattr(self.drafter, name)


class CountingModel:
    """An mlx-lm model whose forward passes (through ``__call__`` or its ``model``) are counted into `passes`."""

    def __init__(self, model, passes: list):
        self.wrapped, self.passes = model, passes

    def __call__(self, inputs, *args, **kwargs):
        self.passes.append(tuple(inputs.shape))
        return self.wrapped(inputs, *args, **kwargs)

    @property
    def model(self):
        inner, passes = self.wrapped.model, self.passes

        def forward(inputs, *args, **kwargs):
            passes.append(tuple(inputs.shape))
            return inner(inputs, *args, **kwargs)

        forward.embed_tokens = inner.embed_tokens
        return forward

    def __getattr__(self, name):
        if name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)


def check_one_pass_per_block(passes: list, prompt: list[int], blocks: int, *, call: str) -> None:
    """The target ran once over the prompt (all but its last token, when there are others) and once per block."""
    expected = blocks + (len(prompt) > 1)
    if len(passes) != expected:
        raise AssertionError(
            f"target forward passes: {len(passes)} (shapes {passes}), expected {expected}: one prefill of a "
            f"{len(prompt)}-token prompt and one pass per verified block ({blocks})\n  call: {call}"
        )


class RecordingKernels:
    """An implementation whose `verify_chain`, `verify_tree` and `draw_tree_children` calls are logged into `calls`;
    every other name is its own."""

    def __init__(self, kernels, calls: list):
        self.kernels, self.calls = kernels, calls

    def verify_chain(self, target_probs, draft_probs, draft_tokens, **kwargs):
        outcome = self.kernels.verify_chain(target_probs, draft_probs, draft_tokens, **kwargs)
        record = {"p": target_probs, "q": draft_probs, "drafts": draft_tokens, "outcome": outcome}
        record["key"] = kwargs.get("key")
        self.calls.append(("verify_chain", record))
        return outcome

    def verify_tree(self, target_probs, draft_probs, tree_tokens, parents, **kwargs):
        # logged before the call: a call that raises is judged too (its outcome stays None)
        record = {"p": target_probs, "q": draft_probs, "tree_tokens": tree_tokens, "parents": parents}
        record.update(mode=kwargs.get("mode"), key=kwargs.get("key"), outcome=None)
        self.calls.append(("verify_tree", record))
        record["outcome"] = self.kernels.verify_tree(target_probs, draft_probs, tree_tokens, parents, **kwargs)
        return record["outcome"]

    def __getattr__(self, name):
        if name == "kernels":
            raise AttributeError(name)
        found = getattr(self.kernels, name)
        if name != "draw_tree_children":
            return found

        # only where the kernels draw: a tree loop given kernels without it draws with its own
        def draw_tree_children(q_row, count, *, mode, key):
            children = found(q_row, count, mode=mode, key=key)
            record = {"q_row": q_row, "count": count, "mode": mode, "key": key, "children": list(children)}
            self.calls.append(("draw_tree_children", record))
            return children

        return draw_tree_children


class ExpandedRound(Exception):
    """A scripted loop reached the round being expanded: its rows are recorded, the rest need not run."""


class ForcedChainOutcome(NamedTuple):
    """What a scripted `verify_chain` decides: ``tokens [1, 2]`` (the draft and a bonus, or a token and -1)."""

    tokens: mx.array
    num_accepted: mx.array


class ScriptedDrafter:
    """A drafter whose one-draft proposals are forced by `drafts`, one per round (the rounds verified so far are
    `handed`'s length); it still proposes (its cache and key advance as they would), and the row the round's first
    proposal drew from is kept in `rows`."""

    def __init__(self, drafter, drafts: list[int], rows: list, handed: list):
        self.drafter, self.drafts, self.rows, self.handed = drafter, drafts, rows, handed

    def propose(self, cache, new_tokens, k, key, *, temperature=1.0, features=None) -> DraftBlock:
        round_ = len(self.handed)
        if k != 1 or round_ >= len(self.drafts):
            raise AssertionError(f"the loop asked for {k} drafts in round {round_}; the script has one a round")
        block = self.drafter.propose(cache, new_tokens, k, key, temperature=temperature, features=features)
        if len(self.rows) == round_:
            self.rows.append(block.probs)
        return DraftBlock(
            tokens=mx.array([[self.drafts[round_]]], dtype=mx.int32), probs=block.probs, codes=block.codes
        )

    def __getattr__(self, name):
        if name == "drafter":
            raise AttributeError(name)
        return getattr(self.drafter, name)


class ScriptedKernels:
    """A `verify_chain` deciding each round as `outcomes` says (``(accepted, token)``); the round after them is
    recorded into `handed` and ends the loop (`ExpandedRound`)."""

    def __init__(self, outcomes: list[tuple[int, int]], handed: list):
        self.outcomes, self.handed = outcomes, handed

    def verify_chain(self, target_probs, draft_probs, draft_tokens, **kwargs):
        self.handed.append((target_probs, draft_probs, draft_tokens))
        if len(self.handed) > len(self.outcomes):
            raise ExpandedRound
        accepted, token = self.outcomes[len(self.handed) - 1]
        tokens = [int(draft_tokens[0, 0].item()), token] if accepted else [token, -1]
        return ForcedChainOutcome(mx.array([tokens], dtype=mx.int32), mx.array([accepted], dtype=mx.int32))


def enumerated_loop_law(run_loop, length: int, *, call: str) -> dict[tuple, float]:
    """The law of the first `length` tokens of a one-draft-a-round drafting loop, every branch walked through it.

    ``run_loop(drafter_wrap, kernels)`` runs the implementation's loop once with its drafter wrapped by
    ``drafter_wrap`` and `kernels` for its `verify_chain`. At each round every draft x is forced in turn (a run
    each, stopped once it is verified): its weight is the drafter's own row at x, the round's outcomes and their
    probabilities come from the p and q rows the loop handed `verify_chain` (`one_draft_round`), and each outcome
    that leaves tokens to emit is forced in the runs below it. The loop's own state carries every branch.
    """
    law: dict[tuple, float] = {}

    def expand(drafts: list[int], outcomes: list[tuple[int, int]], emitted: tuple, mass: float) -> None:
        vocab = None
        x = 0
        while vocab is None or x < vocab:
            rows: list = []
            handed: list = []
            try:
                run_loop(
                    partial(ScriptedDrafter, drafts=drafts + [x], rows=rows, handed=handed),
                    ScriptedKernels(outcomes, handed),
                )
            except ExpandedRound:
                pass
            where = f"{call}  # scripted drafts {drafts + [x]}, outcomes {outcomes}"
            if len(handed) != len(outcomes) + 1 or len(rows) != len(outcomes) + 1:
                raise AssertionError(
                    f"the loop verified {len(handed)} rounds and proposed {len(rows)} after {len(emitted)} of "
                    f"{length} tokens; expected round {len(outcomes) + 1}\n  call: {where}"
                )
            own = as_numpy(rows[-1]).astype(np.float64).reshape(-1)
            vocab = len(own)
            p, q, handed_drafts = handed[-1]
            assert_equal(as_numpy(handed_drafts).reshape(-1), np.array([x]), label="draft handed", call=where)
            weight = own[x] / own.sum()
            p_rows = as_numpy(p).astype(np.float64).reshape(-1, vocab)
            q_row = as_numpy(q).astype(np.float64).reshape(-1)
            for accepted, token, probability in exact_text_drafting.one_draft_round(p_rows, q_row, x):
                out = emitted + ((x, token) if accepted else (token,))
                if len(out) >= length:
                    law[out[:length]] = law.get(out[:length], 0.0) + mass * weight * probability
                elif weight * probability > 0:
                    expand(drafts + [x], outcomes + [(accepted, token)], out, mass * weight * probability)
            x += 1

    expand([], [], (), 1.0)
    return law


def assert_keys_never_reused(calls: list, temperature: float, *, call: str) -> None:
    """No two random calls of one generation (proposals, verifications) at `temperature` > 0 were handed the same
    key (at 0 every draw is an argmax: a key is never read).

    A repeated key repeats its uniforms: across rounds the acceptances correlate, between a drafter and its
    verifier the drafts and their acceptance do, and the law is off however exact each call is.
    """
    if temperature <= 0:
        return
    seen: dict[bytes, str] = {}
    for number, (name, record) in enumerate(calls):
        if record.get("key") is None:
            continue
        raw, where = as_numpy(record["key"]).tobytes(), f"call {number} ({name})"
        if raw in seen:
            raise AssertionError(
                f"{where} was handed the key of {seen[raw]}: {as_numpy(record['key']).tolist()}\n  call: {call}"
            )
        seen[raw] = where


def check_drafted_calls(
    calls: list,
    tokens: list[int] | None,
    target,
    drafter,
    prompt: list[int],
    max_tokens: int,
    temperature: float,
    *,
    call: str,
) -> list[int]:
    """Every `verify_chain` call got the target's exact conditionals and the drafter's own rows; returns
    the drafts each accepted.

    `calls` is the log `RecordingDrafter` and `RecordingKernels` shared; `tokens` what the loop emitted
    (None when it raised: only the calls it made are judged).
    """
    context, proposal = list(prompt), None
    accepted: list[int] = []
    for name, record in calls:
        if name == "propose":
            proposal = record
            read = record["held"] + record["new_tokens"].shape[1]
            if read != len(context):
                raise AssertionError(
                    f"the drafter proposed after reading {read} positions ({record['held']} in its cache and "
                    f"{record['new_tokens'].shape[1]} new), the context emitted before is {len(context)}\n"
                    f"  call: {call}  # proposal after {len(context) - len(prompt)} emitted tokens"
                )
            continue
        number = len(accepted)
        where = f"{call}  # verify_chain call {number}, after {len(context) - len(prompt)} emitted tokens"
        if proposal is None:
            raise AssertionError(f"verify_chain call {number} came before any proposal\n  call: {where}")
        block, drafts = proposal["block"], record["drafts"]
        assert_equal(drafts, block.tokens, label="drafts handed to verify_chain vs the last proposal's", call=where)
        features = target_features(target, context) if drafter.reads_features else None
        if drafter.reads_features:
            assert_close(
                proposal["features"],
                features,
                dtype=mx.float32,
                label="features handed to the drafter vs the target's uncached hidden state at the block's start",
                call=where,
            )
        context_array = mx.array([context], dtype=mx.int32)
        own_rows = drafter.block_probs(context_array, drafts, block.codes, temperature=temperature, features=features)
        assert_close(
            record["q"],
            own_rows,
            dtype=mx.float32,
            label="q rows handed to verify_chain vs the drafter's rows under its codes, recomputed uncached",
            call=where,
        )
        sequence = mx.array([context + as_numpy(drafts).reshape(-1).tolist()], dtype=mx.int32)
        exact = logprobs_at_every_position(target, sequence)[:, len(context) - 1 :]
        assert_close(
            record["p"],
            scaled_softmax(exact, temperature),
            dtype=mx.float32,
            label="p rows handed to verify_chain vs the target's uncached conditionals of what precedes",
            call=where,
        )
        stood = int(record["outcome"].num_accepted[0].item())
        context += [int(t) for t in record["outcome"].tokens[0, : stood + 1].tolist()]
        accepted.append(stood)
        proposal = None
    assert_keys_never_reused(calls, temperature, call=call)
    if tokens is None:  # the loop raised: judged on the calls it made
        return accepted
    replayed = context[len(prompt) :][:max_tokens]
    assert_equal(np.asarray(tokens), np.asarray(replayed), label="emitted tokens vs verify_chain's outcomes", call=call)
    if len(tokens) != max_tokens:
        raise AssertionError(f"emitted {len(tokens)} tokens, asked for {max_tokens}\n  call: {call}")
    return accepted


def sequences(vocab: int, length: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(vocab), repeat=length))


def _rows_by_sequence(score, prompt: list[int], suffixes: list[tuple[int, ...]]) -> dict[tuple, np.ndarray]:
    """`score(batch [N, T]) -> rows [N, V]` for prompt + each suffix (grouped by length), as float64 rows."""
    table = {}
    for length in sorted({len(s) for s in suffixes}):
        group = [s for s in suffixes if len(s) == length]
        rows = as_numpy(score(mx.array([prompt + list(s) for s in group], dtype=mx.int32))).astype(np.float64)
        for suffix, row in zip(group, rows):
            table[suffix] = row / row.sum()
    return table


def drafting_tables(target, drafter, prompt: list[int], length: int, num_draft: int, temperature: float):
    """Float64 tables of both models after `prompt`, for the oracle: ``(target_row, drafter_blocks)``.

    ``target_row(suffix)`` is p(. | prompt + suffix); ``drafter_blocks(suffix)`` lists ``(weight, row)``
    per code, ``row(drafted)`` the drafter's row for the next draft (the block's first len(drafted) drawn).
    """
    vocab = target.args.vocab_size
    contexts = [s for m in range(length) for s in sequences(vocab, m)]
    reach = [s for m in range(length + num_draft) for s in sequences(vocab, m)]
    target_row = target_rows(target, prompt, length + num_draft, temperature)
    features = {}
    if drafter.reads_features:
        for s in contexts:
            features[s] = target_features(target, prompt + list(s))
    if isinstance(drafter, ARDrafter):
        table = _rows_by_sequence(lambda batch: scaled_softmax(drafter.model(batch)[:, -1], temperature), prompt, reach)
        blocks = {s: [(1.0, lambda drafted, s=s: table[s + tuple(drafted)])] for s in contexts}
    else:  # a block drafter's law, z enumerated
        blocks = {}
        for s in contexts:
            context = mx.array([prompt + list(s)], dtype=mx.int32)
            log_law, log_rows = drafter.block_law(context, num_draft, temperature=temperature, features=features.get(s))
            law = np.exp(as_numpy(log_law).astype(np.float64))[0]
            rows = np.exp(as_numpy(log_rows).astype(np.float64))[0]
            rows /= rows.sum(axis=-1, keepdims=True)
            blocks[s] = [(law[z] / law.sum(), lambda drafted, r=rows[z]: r[len(drafted)]) for z in range(len(law))]
    return target_row, (lambda suffix: blocks[tuple(suffix)])


def target_rows(target, prompt: list[int], length: int, temperature: float):
    """``suffix -> p(. | prompt + suffix)`` in float64 at `temperature`, for every suffix shorter than `length`."""
    reach = [s for m in range(length) for s in sequences(target.args.vocab_size, m)]
    table = _rows_by_sequence(
        lambda batch: scaled_softmax(logprobs_at_every_position(target, batch)[:, -1], temperature), prompt, reach
    )
    return lambda suffix: table[tuple(suffix)]
