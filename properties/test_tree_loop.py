"""C13 inside a real loop: tree decoding over mlx-lm's tiny models (the implementation's `generate_tree_drafted`).

Judged call by call, as the chain loops are: every `verify_tree` call the loop makes must be handed the tree it
drafted, the target's exact conditionals at the root and at every node (recomputed by plain causal passes over
each root-to-leaf path: no cache, no tree mask) and the draft's rows its children were drawn from; the loop must
emit what `verify_tree` decided. A wrong mask, wrong positions or a cache holding a rejected branch changes some
handed row. Greedy tree decoding must emit plain greedy decoding's tokens (mlx-lm's own `generate_step`).
"""

from __future__ import annotations

import dataclasses
import functools

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import assume, event, given, note, settings
from hypothesis import strategies as st
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from ncm_verify.evidence.thresholds import MIN_DISTINCT_EXAMPLES
from ncm_verify.harness import stats, strategies
from ncm_verify.harness.checks import (
    as_numpy,
    assert_close,
    assert_decodings_equal,
    assert_distributions_equal,
    assert_joint_sample_fits,
    top_two_gap,
)
from ncm_verify.harness.tree_strategies import LOOP_BRANCHINGS
from ncm_verify.mlx_lm_real.models import TinySpec, make_successor_draft, make_tiny_model, outcome_index
from ncm_verify.mlx_lm_real.text_drafters import RecordingKernels, target_rows
from ncm_verify.mlx_lm_real.tree_decoding import check_tree_calls, enumerated_tree_loop_law
from ncm_verify.oracles import exact_text_drafting, exact_tree
from ncm_verify.reference.tree import MODES
from ncm_verify.tolerances import LAW_FROM_FLOAT32_ROWS

pytestmark = pytest.mark.claim("C13")

TEMPERATURES = (0.7, 1.0, 1.5)
CLOSE_DRAFT_SCALES = (None, 1.5, 2.0, 4.5)
"""A draft with other weights (None), or the target's weights under a scaled head: long accepted paths."""
PEAKED_DRAFT_SCALE = 100.0
"""The target's weights under a head scaled by 100: rows with exact zeros (1-5 of 8 tokens keep mass), where a child
drawn from any row but its parent's shows exactly; without replacement a row's support may be narrower than its
branching, where the loop drafts only that support."""


@functools.lru_cache(maxsize=64)
def tiny_model(spec: TinySpec):
    return make_tiny_model(spec)


@functools.lru_cache(maxsize=16)
def successor_draft(spec: TinySpec):
    return make_successor_draft(spec)


def draw_pair(data, scales=CLOSE_DRAFT_SCALES):
    """A target, a draft over its vocabulary, and how to rebuild them."""
    spec = TinySpec(
        vocab_size=data.draw(st.sampled_from([8, 16]), label="vocab"), seed=data.draw(st.integers(0, 2**16))
    )
    scale = data.draw(st.sampled_from(scales), label="draft logit_scale")
    draft = spec.with_seed(spec.seed + 1) if scale is None else dataclasses.replace(spec, logit_scale=scale)
    return spec, tiny_model(spec), draft, tiny_model(draft)


def run_judged_call_by_call(impl, target, draft, prompt, max_tokens, branching, mode, temperature, seed, call):
    """Run the implementation's tree loop with `verify_tree` recorded, then judge every call (`check_tree_calls`);
    a loop that raises is judged on the calls it made before. Returns each round's (accepted, path, parents)."""
    calls: list = []
    arguments = (target, draft, prompt, max_tokens, temperature, branching, mode)
    try:
        generation = impl.generate_tree_drafted(
            target,
            draft,
            prompt,
            max_tokens,
            branching=branching,
            mode=mode,
            key=mx.random.key(seed),
            temperature=temperature,
            kernels=RecordingKernels(impl, calls),
        )
    except Exception:
        check_tree_calls(calls, None, *arguments, call=call, draw=impl.draw_tree_children)
        raise
    return check_tree_calls(calls, generation.tokens, *arguments, call=call, draw=impl.draw_tree_children)


@settings(deadline=None)
@given(data=st.data())
def test_every_verify_tree_call_of_the_tree_loop_is_handed_the_exact_conditionals_at_every_node(impl, data):
    """The loop is exact iff each round verifies the target's exact p at every node against the q its children
    came from.

    `verify_tree` is wrapped to record each call; the handed tree must be the loop's shape, every p row the
    target's uncached conditional of the context and the root-to-node path, every q row the draft's, top-k
    children their row's top k, the emitted tokens what `verify_tree` decided, and no round's key a reused one. A
    loop that raises is judged on the calls it made before.
    """
    mode = data.draw(st.sampled_from(MODES), label="mode")
    spec, target, draft_spec, draft = draw_pair(data, CLOSE_DRAFT_SCALES + (PEAKED_DRAFT_SCALE,))
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 6), label="prompt")
    max_tokens = data.draw(st.integers(1, 10), label="max_tokens")
    branching = data.draw(st.sampled_from(LOOP_BRANCHINGS), label="branching")
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    seed = data.draw(strategies.seeds, label="seed")
    call = (
        f"generate_tree_drafted(make_tiny_model({spec}), make_tiny_model({draft_spec}), {prompt}, {max_tokens}, "
        f"branching={branching}, mode={mode!r}, key=mx.random.key({seed}), temperature={temperature})"
    )
    note(call)
    rounds = run_judged_call_by_call(impl, target, draft, prompt, max_tokens, branching, mode, temperature, seed, call)
    # compaction is seen only when a later round follows a path other than the first rows in index order
    off_first = [path != list(range(len(path))) for _, path, _ in rounds[:-1]]
    event(f"mode: {mode}")
    event("a later round after a path off the first rows" if any(off_first) else "no path off the first rows")


def tree_depth(parents: list[int]) -> int:
    """The depth of a breadth-first tree given its nodes' parents (0 for no node)."""
    depths: list[int] = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return max(depths, default=0)


WIDE_BRANCHINGS = ((2, 2), (3, 1), (2, 3), (3, 2))
"""Trees with several nodes at a level: a child drawn from a sibling's row lands outside its own row's support; a 3
exceeds a successor draft's support of 2, which without replacement narrows the tree."""


CHILDREN_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""One or two rounds a generation (about 0.1 s): the distinct examples a claim's property must show, two more."""


@settings(max_examples=CHILDREN_EXAMPLES, deadline=None)
@given(data=st.data())
def test_every_child_the_tree_loop_draws_lies_where_the_q_handed_for_its_parent_has_mass(impl, data):
    """Sampled children against the q rows handed to `verify_tree`, on drafts whose rows hold exact zeros.

    A draw cannot be replayed, but a child outside its parent's handed support was drawn from another row; each
    call is also judged as above (`check_tree_calls`). Every mode; the rows keep two tokens, so without replacement
    a branching of 3 meets a row narrower than it (the loop drafts its support alone); one or two rounds each.
    """
    spec = TinySpec(vocab_size=8, seed=data.draw(st.integers(0, 2**16), label="target seed"))
    draft_spec = spec.with_seed(data.draw(st.integers(0, 2**16), label="draft seed"))
    target, draft = tiny_model(spec), successor_draft(draft_spec)
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 4), label="prompt")
    branching = data.draw(st.sampled_from(WIDE_BRANCHINGS), label="branching")
    mode = data.draw(st.sampled_from(MODES), label="mode")
    max_tokens = data.draw(st.integers(len(branching), 2 * len(branching) + 1), label="max_tokens")
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    seed = data.draw(strategies.seeds, label="seed")
    call = (
        f"generate_tree_drafted(make_tiny_model({spec}), make_successor_draft({draft_spec}), {prompt}, "
        f"{max_tokens}, branching={branching}, mode={mode!r}, key=mx.random.key({seed}), temperature={temperature})"
    )
    note(call)
    rounds = run_judged_call_by_call(impl, target, draft, prompt, max_tokens, branching, mode, temperature, seed, call)
    # a round of depth d is narrowed when it holds fewer nodes than branching[:d] gives
    narrowed = any(
        len(parents) < len(exact_tree.tree_nodes(branching[: tree_depth(parents)])) for _, _, parents in rounds
    )
    event(f"mode: {mode}" + (", a row narrower than its branching" if narrowed else ""))


TREE_ENUMERATION_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""Each example runs the loop once per branch left with tokens to emit (5-40 runs of 1-3 rounds): the distinct
examples a claim's property must show, two more."""


@settings(max_examples=TREE_ENUMERATION_EXAMPLES, deadline=None)
@given(data=st.data())
def test_the_implementations_top_k_tree_loop_enumerates_to_the_target_law_over_rounds(impl, data):
    """The implementation's tree loop, every verification branch walked through it, emits the target's law.

    Top-k children are a function of the context, so only `verify_tree`'s outcomes branch: each round's are weighted
    from the tree and rows the loop handed it and forced in the runs below (`enumerated_tree_loop_law`), so later
    rounds run on the loop's own compacted caches after every path the verifier can take.
    """
    spec = TinySpec(vocab_size=data.draw(st.sampled_from([4, 6]), label="vocab"), seed=data.draw(st.integers(0, 2**16)))
    scale = data.draw(st.sampled_from(CLOSE_DRAFT_SCALES), label="draft logit_scale")
    draft_spec = spec.with_seed(spec.seed + 1) if scale is None else dataclasses.replace(spec, logit_scale=scale)
    target, draft = tiny_model(spec), tiny_model(draft_spec)
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 4), label="prompt")
    branching = data.draw(st.sampled_from(((1,), (2,), (3,), (1, 1), (2, 1))), label="branching")
    length = data.draw(st.integers(2, 3), label="tokens")
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    seed = data.draw(strategies.seeds, label="seed")
    call = (
        f"generate_tree_drafted(make_tiny_model({spec}), make_tiny_model({draft_spec}), {prompt}, {length}, "
        f"branching={branching}, mode='top_k', key=mx.random.key({seed}), temperature={temperature}) scripted"
    )
    note(call)

    def run_loop(kernels):
        impl.generate_tree_drafted(
            target,
            draft,
            prompt,
            length,
            branching=branching,
            mode="top_k",
            key=mx.random.key(seed),
            temperature=temperature,
            kernels=kernels,
        )

    law = enumerated_tree_loop_law(run_loop, length, "top_k", call=call)
    assert_distributions_equal(
        law,
        exact_text_drafting.target_law(target_rows(target, prompt, length, temperature), length),
        label=f"the tree loop's law of {length} tokens, enumerated through it, vs the target's",
        call=call,
        tolerance=LAW_FROM_FLOAT32_ROWS,
    )


SAMPLED_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""Each example runs about 1-2 thousand generations of 2-3 rounds (20-60 ms each here): thorough runs only."""


@pytest.mark.thorough_only  # 20-60 CPU-s an example; the loop's evidence is the exact enumeration and the call checks
@pytest.mark.statistical(tests=1)
@settings(max_examples=SAMPLED_EXAMPLES, deadline=None)
@given(data=st.data())
def test_sampled_tree_loop_generations_follow_the_target_law_over_rounds(impl, data):
    """A smoke test of the tree loop's sampled output in every mode: the law of two or three tokens over V = 4.

    Its plan detects a total-variation deviation of `stats.LOOP_TARGET_TV` (0.2) with power 0.99: gross errors in
    the children drawn, the walk or the rounds' state, with the loop's own randomness (the enumeration forces it).
    """
    spec = TinySpec(vocab_size=4, seed=data.draw(st.integers(0, 2**16), label="target seed"))
    draft_spec = spec.with_seed(data.draw(st.integers(0, 2**16), label="draft seed"))
    target, draft = tiny_model(spec), tiny_model(draft_spec)
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 3), label="prompt")
    branching = data.draw(st.sampled_from(((2,), (3,), (1, 1), (2, 1))), label="branching")
    mode = data.draw(st.sampled_from(MODES), label="mode")
    length = data.draw(st.integers(2, 3), label="tokens")
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    seed = data.draw(strategies.seeds, label="seed")
    law = np.zeros(spec.vocab_size**length)
    for tokens, mass in exact_text_drafting.target_law(
        target_rows(target, prompt, length, temperature), length
    ).items():
        law[outcome_index(list(tokens), spec.vocab_size)] += mass
    call = (
        f"generate_tree_drafted(make_tiny_model({spec}), make_tiny_model({draft_spec}), {prompt}, {length}, "
        f"branching={branching}, mode={mode!r}, key=mx.random.split(mx.random.key({seed}), n)[i], "
        f"temperature={temperature})"
    )
    note(call)
    assume(stats.loop_smoke_sized({"tokens": law}))

    def sample(n: int) -> dict[str, np.ndarray]:
        outcomes = np.empty(n, dtype=np.int64)
        for i, key in enumerate(mx.random.split(mx.random.key(seed), n)):
            generation = impl.generate_tree_drafted(
                target, draft, prompt, length, branching=branching, mode=mode, key=key, temperature=temperature
            )
            outcomes[i] = outcome_index(generation.tokens, spec.vocab_size)
        return {"tokens": outcomes}

    assert_joint_sample_fits({"tokens": law}, sample, target_tv=stats.LOOP_TARGET_TV, seed=seed, call=call)


@settings(deadline=None)
@given(data=st.data())
def test_greedy_tree_decoding_emits_the_tokens_of_plain_greedy_decoding(impl, data):
    """At temperature 0 (one-hot target rows, the draft's top-k children) the loop emits mlx-lm's greedy tokens."""
    spec, target, draft_spec, draft = draw_pair(data)
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 6), label="prompt")
    max_tokens = data.draw(st.integers(1, 12), label="max_tokens")
    branching = data.draw(st.sampled_from(LOOP_BRANCHINGS), label="branching")
    call = (
        f"generate_tree_drafted(make_tiny_model({spec}), make_tiny_model({draft_spec}), {prompt}, {max_tokens}, "
        f"branching={branching}, mode='top_k', key=mx.random.key(0), temperature=0) vs mlx_lm generate_step"
    )
    note(call)
    plain = list(generate_step(mx.array(prompt), target, max_tokens=max_tokens))
    generation = impl.generate_tree_drafted(
        target, draft, prompt, max_tokens, branching=branching, mode="top_k", key=mx.random.key(0), temperature=0
    )
    margin = min(top_two_gap(logprobs) for _, logprobs in plain)
    scale = max(float(np.abs(as_numpy(logprobs)).max()) for _, logprobs in plain)
    event("a node accepted" if max(generation.accepted, default=0) > 0 else "no node accepted")
    assert_decodings_equal(
        generation.tokens,
        [int(token) for token, _ in plain],
        margin=margin,
        scale=scale,
        dtype=mx.float32,
        label="greedy tree-decoded tokens vs mlx-lm generate_step's",
        call=call,
    )


@settings(deadline=None)
@given(data=st.data())
def test_caches_after_tree_decoding_hold_exactly_the_context_their_offset_claims(impl, data):
    """After the loop both caches hold the prompt and every emitted token but the last, as a chain would have.

    Judged as the model attends to them (mlx-lm's `state` is opaque): a probe continuation's logits through
    each cache vs one uncached pass over the tokens it claims and the probe. K/V kept from a rejected branch,
    or computed under a wrong mask or position, show.
    """
    spec, target, draft_spec, draft = draw_pair(data)
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 6), label="prompt")
    max_tokens = data.draw(st.integers(1, 10), label="max_tokens")
    branching = data.draw(st.sampled_from(LOOP_BRANCHINGS), label="branching")
    mode = data.draw(st.sampled_from(MODES), label="mode")
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    seed = data.draw(strategies.seeds, label="seed")
    probe = data.draw(strategies.token_lists(spec.vocab_size, 1, 3), label="probe")
    call = (
        f"generate_tree_drafted(make_tiny_model({spec}), make_tiny_model({draft_spec}), {prompt}, {max_tokens}, "
        f"branching={branching}, mode={mode!r}, key=mx.random.key({seed}), temperature={temperature}, "
        f"target_cache=..., draft_cache=...); probe {probe}"
    )
    note(call)
    caches = {"target": make_prompt_cache(target), "draft": make_prompt_cache(draft)}
    generation = impl.generate_tree_drafted(
        target,
        draft,
        prompt,
        max_tokens,
        branching=branching,
        mode=mode,
        key=mx.random.key(seed),
        temperature=temperature,
        target_cache=caches["target"],
        draft_cache=caches["draft"],
    )
    tokens = prompt + list(generation.tokens)
    event(f"mode: {mode}")
    for name, model in (("target", target), ("draft", draft)):
        offsets = [layer.offset for layer in caches[name]]
        held = offsets[0]
        assert len(set(offsets)) == 1 and held <= len(tokens), (
            f"{name} cache: layer offsets {offsets} after {len(tokens)} tokens (prompt {len(prompt)}, "
            f"{len(generation.tokens)} emitted): a cache cannot hold more positions than tokens exist\n  call: {call}"
        )
        got = model(mx.array([probe], dtype=mx.int32), cache=caches[name])[0].astype(mx.float32)
        want = model(mx.array([tokens[:held] + probe], dtype=mx.int32))[0, held:].astype(mx.float32)
        assert_close(
            got,
            want,
            dtype=mx.float32,
            label=f"{name} cache after tree decoding vs built from the {held} tokens it claims",
            call=call,
        )
