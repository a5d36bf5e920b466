"""vllm-mlx 0.6.0 judged on the sampled MTP rule its image/text batch generator composes (`peers.vllm_mlx_spec`).

make install-peers PEER=vllm-mlx && make verify-peers PEERS=vllm-mlx
"""

from __future__ import annotations

import contextlib

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from peer_checks import assert_first_tokens_follow_the_law, first_difference, first_tokens_law, tempered

from ncm_verify.peers import vllm_mlx_spec as peer
from ncm_verify.tolerances import NORMALISATION, TOLERANCES

CHEAP = settings(max_examples=30)
"""The rule properties take milliseconds to a second an example: more examples than the profile's default."""
FLOAT32_LAW = NORMALISATION[mx.float32]
"""TV admitted between the emitted law and p: both come from float32 rows, each within this of a unit sum."""


@st.composite
def rows(draw):
    """A target logit row, a draft row (nearly equal, or unrelated) and a request's sampling fields."""
    vocab = draw(st.sampled_from([8, 64, 1000]), label="vocab")
    scale = draw(st.sampled_from([0.5, 2.0, 6.0]), label="logit scale")
    noise = draw(st.sampled_from([1e-3, 0.3, 3.0]), label="draft noise")
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1), label="logits seed"))
    target = scale * rng.normal(size=vocab)
    req = peer.request(
        draw(st.sampled_from([0.3, 0.7, 1.0, 1.6]), label="temperature"),
        draw(st.sampled_from([1.0, 0.95, 0.6]), label="top_p"),
        draw(st.sampled_from([0, 3, 20] if vocab > 20 else [0, 3]), label="top_k"),  # mlx-lm refuses top_k >= V
        draw(st.sampled_from([0.0, 0.05]), label="min_p"),
    )
    return target, target + noise * rng.normal(size=vocab), req


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("variant", ["own", "planted"])
@CHEAP
@given(case=rows())
def test_the_sampled_mtp_rule_emits_exactly_p_for_drafts_from_q(variant, case):
    """The native sampled MTP branch's token, its draft drawn from q, has law p: acceptance read from
    `_accept_sampled_draft`'s own answers, the correction law from `_residual_logprobs`, p and q from
    `_sampling_logprobs` on the verify and draft logits under one request's temperature, top-p, top-k, min-p."""
    target, draft, req = case
    p_log, q_log = peer.sampling_logprobs(target, req), peer.sampling_logprobs(draft, req)
    with np.errstate(divide="ignore"):
        if variant == "planted":
            with peer.planted():
                law = peer.rule_law(p_log, q_log)
        else:
            law = peer.rule_law(p_log, q_log)
    p = np.exp(p_log.astype(np.float64))
    tv = 0.5 * float(np.abs(law - p).sum())
    worst = np.argsort(-np.abs(law - p))[:3]
    assert tv <= FLOAT32_LAW, (
        f"{req}: emitted law differs from p by TV {tv:.3g}; worst tokens {worst.tolist()}: "
        f"law {law[worst].round(6).tolist()} vs p {p[worst].round(6).tolist()}"
    )


@pytest.mark.peer_law
@pytest.mark.peer_property(2)
@pytest.mark.parametrize("variant", ["own", "planted"])
@settings(max_examples=1)
@given(data=st.data())
def test_sampled_tokens_of_the_mtp_branch_follow_the_target_law(variant, data):
    """The sampled MTP branch drawn with MLX's own generator (`peer.sampled_branch`, seeded from the example):
    the emitted tokens' law fits p = `_sampling_logprobs` of the verify logits under the statistical policy (a
    chi-square at TV 0.02, power 0.99; V = 8, unrelated target and draft rows so that drafts miss)."""
    from ncm_verify.harness import stats, strategies
    from ncm_verify.harness.checks import assert_joint_sample_fits

    rows = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1), label="logits seed")).normal(size=(2, 8))
    req = peer.request(data.draw(st.sampled_from([1.0, 0.7]), label="temperature"))
    seed = data.draw(strategies.seeds, label="mx.random.seed")
    p_log, q_log = (peer.sampling_logprobs(2.0 * row, req) for row in rows)

    def sample(n: int) -> dict[str, np.ndarray]:
        mx.random.seed(seed)
        with peer.planted() if variant == "planted" else contextlib.nullcontext():
            return {"emitted token": peer.sampled_branch(p_log, q_log, n)}

    p = np.exp(p_log.astype(np.float64))
    call = f"mx.random.seed({seed}); sampled_branch(p_log, q_log, n)  # {req}"
    assert_joint_sample_fits({"emitted token": p / p.sum()}, sample, target_tv=stats.TARGET_TV, seed=seed, call=call)


@pytest.mark.peer_property(4)
@CHEAP
@given(case=rows())
def test_the_speculative_distribution_is_plain_decodings_under_every_sampling_option(case):
    """`_sampling_logprobs` (the p and q of the MTP rule) equals the law mlx-lm's own `make_sampler` (plain
    decoding's sampler) draws from, for temperature, top-p, top-k and min-p."""
    target, _, req = case
    speculative = np.exp(peer.sampling_logprobs(target, req).astype(np.float64))
    plain = peer.plain_law(target, req)
    tol = TOLERANCES[mx.float32]
    assert set(np.flatnonzero(speculative > 0)) == set(np.flatnonzero(plain > 0)), (
        f"{req}: supports differ: speculative {np.flatnonzero(speculative > 0).tolist()[:10]}, "
        f"plain {np.flatnonzero(plain > 0).tolist()[:10]}"
    )
    assert np.allclose(speculative, plain, atol=tol.atol, rtol=tol.rtol), f"worst {np.abs(speculative - plain).max()}"


ENGINE_KINDS = ("attention", "sliding-window")
"""mlx-vlm's Gemma 4 targets with its Gemma 4 assistant drafter: the pairing `install_mtp_mllm`'s external drafter
serves. (mlx-vlm's Qwen 3.5 MTP drafter is not an assistant: every round fails with ``'Qwen3_5DecoderLayer' object
has no attribute 'layer_type'`` and the engine decodes without it.)"""


@st.composite
def served(draw, kind: str, min_tokens: int = 4):
    """A target of `kind`, its assistant drafter, two prompts of different lengths and a budget."""
    from ncm_verify.peers import mlx_vlm_spec as vlm

    vocab = draw(st.sampled_from([4, 6, 12]), label="vocab")
    weights = draw(st.integers(0, 2**16), label="weights seed")
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=5), label="prompt")
    other = draw(st.lists(st.integers(0, vocab - 1), min_size=len(prompt) + 1, max_size=len(prompt) + 4))
    max_tokens = draw(st.integers(min_tokens, 16), label="max_tokens")
    target = vlm.make_target(kind, weights, vocab)
    note(
        f"from ncm_verify.peers import mlx_vlm_spec as vlm; target = vlm.make_target({kind!r}, {weights}, {vocab}); "
        f"drafter = vlm.make_drafter('mtp', target, {weights + 1}); serve(target, {[prompt, other]}, {max_tokens}, "
        "drafter, ...)"
    )
    return target, vlm.make_drafter("mtp", target, weights + 1), [prompt, other], max_tokens


@pytest.mark.peer_property(1, 3)
@pytest.mark.parametrize("kind", ENGINE_KINDS)
@given(data=st.data())
def test_greedy_requests_served_with_the_assistant_get_plain_decoding_each_alone(kind, data):
    """Temperature 0: `MLLMBatchGenerator` with the external assistant drafter, two requests of different lengths
    batched, emits for each what mlx-vlm's plain `generate_step` emits for it alone, and what the engine emits
    for it alone without a drafter; the drafter must have been tried."""
    from ncm_verify.peers import mlx_vlm_spec as vlm

    target, drafter, prompts, max_tokens = data.draw(served(kind))
    together, stats = peer.serve(target, prompts, max_tokens, drafter)
    assert stats.get("attempted", 0) > 0 and not stats.get("errors"), f"the drafter did not run cleanly: {stats}"
    for row, prompt in enumerate(prompts):
        plain = vlm.generate(target, prompt, max_tokens, temperature=0.0)
        alone, _ = peer.serve(target, [prompt], max_tokens)
        assert alone[0] == plain, f"row {row}: the engine alone {alone[0]} != plain {plain}"
        assert together[row] == plain, (
            f"row {row} (prompt {prompt}): served with the drafter beside another request {together[row]} != "
            f"plain {plain}: {first_difference(together[row], plain)}; {stats}"
        )


PENALTIES = {"repetition_penalty": 3.0, "presence_penalty": 2.0}


@pytest.mark.peer_property(4, 6)
@pytest.mark.parametrize("option", sorted(PENALTIES))
@given(data=st.data())
def test_request_penalties_act_on_the_served_speculative_path_as_without_it(option, data):
    """A request's repetition / presence penalty (`MLLMBatchRequest` fields, made into logits processors) shapes the
    tokens served with the assistant drafter as it shapes them without it, at temperature 0."""
    target, drafter, prompts, max_tokens = data.draw(served("attention", min_tokens=8))
    fields = {option: PENALTIES[option]}
    speculative, stats = peer.serve(target, prompts, max_tokens, drafter, **fields)
    plain, _ = peer.serve(target, prompts, max_tokens, **fields)
    note(f"MTP statistics {stats}")
    assert speculative == plain, f"with {fields}: speculative {speculative} != plain {plain}"


@pytest.mark.peer_law
@pytest.mark.peer_property(2, 3)
@settings(max_examples=1)
@given(data=st.data())
def test_the_first_sampled_tokens_of_a_request_served_beside_another_follow_the_target_law(data):
    """Temperature > 0: the first two tokens `MLLMBatchGenerator` serves a request (the prefill's draw, then a
    verified assistant draft or the target's draw), batched with a second request, follow the target's exact
    joint law (float64, uncached forward passes) under the statistical policy (a chi-square at TV 0.2, power
    0.99; V = 4; about 30 ms a run)."""
    from ncm_verify.harness import strategies
    from ncm_verify.peers import mlx_vlm_spec as vlm

    weights = data.draw(st.integers(0, 2**16), label="weights seed")
    target = vlm.make_target("attention", weights, 4)
    drafter = vlm.make_drafter("mtp", target, weights + 1)
    prompt = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4), label="prompt")
    other = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=6), label="other prompt")
    temperature = data.draw(st.sampled_from([1.5, 1.0]), label="temperature")  # flat first: drafts miss
    seed = data.draw(strategies.seeds, label="mx.random.seed")
    law = first_tokens_law(lambda tokens: tempered(vlm.conditional(target, tokens), temperature), prompt, 2)

    def decode() -> list[int]:
        return peer.serve(target, [prompt, other], 2, drafter, temperature=temperature)[0][0]

    call = (
        f"mx.random.seed({seed}); serve(vlm.make_target('attention', {weights}, 4), {[prompt, other]}, 2, "
        f"drafter, temperature={temperature})"
    )
    assert_first_tokens_follow_the_law(law, decode, 4, seed=seed, call=call)


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("kind", ENGINE_KINDS)
@given(data=st.data())
def test_after_every_step_the_batch_caches_attend_as_caches_rebuilt_from_the_tokens_they_hold(kind, data):
    """After every engine step with the assistant drafter (rounds that accept, defer the draft, or reject and roll
    back), a deep copy of the batch's caches fed one probe token gives each row the log-probabilities one uncached
    pass over that request's prompt, the tokens it went on to emit up to the count its cache holds, and the
    probe gives (the held count may include a draft served at the next step)."""
    from ncm_verify.peers import mlx_vlm_spec as vlm

    target, drafter, prompts, max_tokens = data.draw(served(kind))
    probe = data.draw(st.integers(0, target.config.vocab_size - 1), label="probe")
    probes: list = []
    emitted, stats = peer.serve(target, prompts, max_tokens, drafter, probe=probe, probes=probes)
    assert probes, "no step left an active batch to read: nothing was judged"
    tol = TOLERANCES[mx.float32]
    for step, (request, held, cached) in enumerate(probes):
        tokens = prompts[request] + emitted[request]
        if held > len(tokens):  # a draft verified past the budget, at the request's last step: never served
            assert len(emitted[request]) == max_tokens, f"probe {step}: request {request} holds {held} > {len(tokens)}"
            continue
        rebuilt = np.array(vlm.conditional(target, tokens[:held] + [probe]))
        assert np.allclose(cached, rebuilt, atol=tol.atol, rtol=tol.rtol), (
            f"probe {step}: request {request}'s cache (holding {tokens[:held]}) differs from one rebuilt from them "
            f"by up to {np.abs(cached - rebuilt).max():.3g} nats after probe {probe}; served {emitted}; {stats}"
        )


@pytest.mark.peer_property(1, 3, 5)
@given(data=st.data())
def test_the_native_mtp_branch_on_a_hybrid_target_serves_plain_decoding_and_rebuilt_caches(data, tmp_path_factory):
    """The native MTP branch (`install_mtp_mllm` without a drafter) on mlx-vlm's hybrid Qwen 3.5 target given an MTP
    head by vllm-mlx's own `inject_mtp_support`: at temperature 0 two requests served together each get plain
    decoding's tokens, and after every step each row's caches (attention KV, GatedDeltaNet conv and recurrent
    state, restored from the round's snapshot on a rejection) attend as caches rebuilt from the tokens held."""
    from ncm_verify.peers import mlx_vlm_spec as vlm

    vocab = data.draw(st.sampled_from([4, 6, 12]), label="vocab")
    weights = data.draw(st.integers(0, 2**16), label="weights seed")
    prompt = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=5), label="prompt")
    # one length: a left-padded hybrid row is off already without MTP (the mlx-vlm server engine's finding's class)
    other = data.draw(st.lists(st.integers(0, vocab - 1), min_size=len(prompt), max_size=len(prompt)), label="other")
    max_tokens = data.draw(st.integers(4, 12), label="max_tokens")
    probe = data.draw(st.integers(0, vocab - 1), label="probe")
    target, plain_model = peer.make_native_mtp_target(weights, vocab, tmp_path_factory.mktemp("mtp"))
    note(
        f"make_native_mtp_target({weights}, {vocab}, dir); serve(target, {[prompt, other]}, {max_tokens}, native=True)"
    )
    probes: list = []
    served_tokens, stats = peer.serve(target, [prompt, other], max_tokens, native=True, probe=probe, probes=probes)
    assert stats.get("attempted", 0) > 0 and not stats.get("errors"), f"the MTP head did not run cleanly: {stats}"
    for row, alone_prompt in enumerate((prompt, other)):
        plain = vlm.generate(plain_model, alone_prompt, max_tokens, temperature=0.0)
        assert served_tokens[row] == plain, (
            f"row {row}: served {served_tokens[row]} != plain {plain}: {first_difference(served_tokens[row], plain)}"
        )
    tol = TOLERANCES[mx.float32]
    for step, (request, held, cached) in enumerate(probes):
        tokens = [prompt, other][request] + served_tokens[request]
        if held > len(tokens):  # a draft verified past the budget, at the request's last step: never served
            assert len(served_tokens[request]) == max_tokens, f"probe {step}: request {request} holds {held} tokens"
            continue
        tokens = tokens[:held]
        rebuilt = np.array(vlm.conditional(plain_model, tokens + [probe]))
        assert np.allclose(cached, rebuilt, atol=tol.atol, rtol=tol.rtol), (
            f"probe {step}: request {request}'s caches (holding {tokens}) differ from rebuilt ones by up to "
            f"{np.abs(cached - rebuilt).max():.3g} nats after probe {probe}; {stats}"
        )


def assert_each_row_is_plain_greedy(model, prompts, emitted, max_tokens: int, label: str) -> None:
    """Each served row equals mlx-vlm's plain greedy `generate_step` for its prompt alone."""
    from ncm_verify.peers import mlx_vlm_spec as vlm

    for row, prompt in enumerate(prompts):
        plain = vlm.generate(model, prompt, max_tokens, temperature=0.0)
        assert emitted[row] == plain, (
            f"row {row} (prompt {prompt}): served {emitted[row]} != plain greedy {plain}: "
            f"{first_difference(emitted[row], plain)}; {label}"
        )


@pytest.mark.peer_property(1, 6)
@given(data=st.data())
def test_requests_that_do_not_ask_for_the_assistant_get_plain_decoding_beside_ones_that_do(data):
    """With the assistant drafter installed, a request without ``mllm_draft`` is served plain decoding whatever its
    neighbour asked: alone, or batched beside a request that asks (the engine bypasses the assistant for the whole
    batch then); each gets what mlx-vlm's plain `generate_step` gives it alone."""
    target, drafter, prompts, max_tokens = data.draw(served("attention"))
    requested = data.draw(st.sampled_from([(False, False), (True, False), (False, True)]), label="requested")
    emitted, stats = peer.serve(target, prompts, max_tokens, drafter, requested=requested)
    note(f"MTP statistics {stats}")
    assert_each_row_is_plain_greedy(
        target, prompts, emitted, max_tokens, f"asked for the assistant {requested}; {stats}"
    )


@pytest.mark.peer_property(2, 3)
@pytest.mark.parametrize("branch", ["assistant", "native"])
@given(data=st.data())
def test_a_sampled_request_whose_law_is_a_point_mass_gets_greedy_decoding_on_the_sampled_branches(
    branch, data, tmp_path_factory
):
    """Temperature > 0 with top-k 1 sends a request down the sampled MTP branches (the assistant's, the native
    head's with its per-row acceptance, residual and, for a batch of one, the residual draw) while its law is the
    argmax's point mass: served alone and beside another request, each must get exactly plain greedy decoding."""

    temperature = data.draw(st.sampled_from([0.7, 1.3]), label="temperature")
    mx.random.seed(data.draw(st.integers(0, 2**31 - 1), label="mx.random.seed"))
    if branch == "assistant":
        target, drafter, prompts, max_tokens = data.draw(served("attention"))
        plain_model, options = target, {"drafter": drafter}
    else:
        vocab = data.draw(st.sampled_from([4, 6, 12]), label="vocab")
        weights = data.draw(st.integers(0, 2**16), label="weights seed")
        prompt = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=5), label="prompt")
        other = data.draw(st.lists(st.integers(0, vocab - 1), min_size=len(prompt), max_size=len(prompt)))
        prompts, max_tokens = [prompt, other], data.draw(st.integers(4, 12), label="max_tokens")
        target, plain_model = peer.make_native_mtp_target(weights, vocab, tmp_path_factory.mktemp("mtp"))
        options = {"native": True}
    for batch in ([prompts[0]], prompts):
        emitted, stats = peer.serve(target, batch, max_tokens, temperature=temperature, top_k=1, **options)
        assert stats.get("attempted", 0) > 0 and not stats.get("errors"), f"the MTP branch did not run: {stats}"
        label = f"{branch}, {len(batch)} request(s), temperature {temperature}, top_k=1; {stats}"
        assert_each_row_is_plain_greedy(plain_model, batch, emitted, max_tokens, label)


@pytest.mark.peer_property(1, 4)
@settings(max_examples=8)  # a stop token drafted and accepted takes a draw whose drafter guesses it
@given(data=st.data())
def test_a_stop_token_ends_each_request_served_with_the_assistant_where_plain_decoding_ends_it(data):
    """A stop token the engine knows (`stop_tokens`) ends a request when emitted, drafted and accepted or not: two
    greedy requests served with the assistant each get plain decoding up to and including their first stop token,
    as the engine gives them without a drafter."""
    from ncm_verify.peers import mlx_vlm_spec as vlm

    target, drafter, prompts, max_tokens = data.draw(served("attention", min_tokens=6))
    plains = [vlm.generate(target, prompt, max_tokens, temperature=0.0) for prompt in prompts]
    stop = data.draw(st.sampled_from(sorted(set(plains[0][1:]) or {plains[0][0]})), label="stop token")
    emitted, stats = peer.serve(target, prompts, max_tokens, drafter, stop_tokens={stop})
    alone, _ = peer.serve(target, prompts, max_tokens, stop_tokens={stop})
    note(f"MTP statistics {stats}")
    for row, plain in enumerate(plains):
        want = plain[: plain.index(stop) + 1] if stop in plain else plain
        assert alone[row] == want, f"row {row}: the engine without a drafter {alone[row]} != {want} (stop {stop})"
        assert emitted[row] == want, (
            f"row {row}, stop token {stop}: served with the assistant {emitted[row]} != plain up to the stop {want}; "
            f"{stats}"
        )


@pytest.mark.peer_property(1, 3)
@given(data=st.data())
def test_requests_of_different_budgets_served_together_each_get_plain_decoding_to_their_own_budget(data):
    """Two greedy requests with the assistant, the shorter one's budget reached first (possibly by an accepted
    draft, which ends it inside a round while the other goes on): each gets plain decoding, as long as its own
    `max_tokens`."""
    from ncm_verify.peers import mlx_vlm_spec as vlm

    target, drafter, prompts, max_tokens = data.draw(served("attention", min_tokens=6))
    short = data.draw(st.integers(2, max_tokens - 2), label="shorter budget")
    budgets = data.draw(st.permutations([short, max_tokens]), label="budgets")
    emitted, stats = peer.serve(target, prompts, max_tokens, drafter, budgets=budgets)
    for row, (prompt, budget) in enumerate(zip(prompts, budgets)):
        plain = vlm.generate(target, prompt, budget, temperature=0.0)
        assert emitted[row] == plain, (
            f"row {row}, max_tokens {budget} of {budgets}: served {emitted[row]} != plain {plain}: "
            f"{first_difference(emitted[row], plain)}; {stats}"
        )


def test_text_mtp_installs_on_the_mlx_lm_its_pin_admits():
    """vllm-mlx pins mlx-lm>=0.31.3,<0.32; its text MTP (`scheduler._install_mtp`) must install on that mlx-lm's
    BatchGenerator (it then exposes `get_mtp_stats`), or the path cannot be run, let alone judged."""
    import mlx_lm
    from mlx_lm.generate import BatchGenerator
    from vllm_mlx.scheduler import _install_mtp

    from ncm_verify.peers.mlx_tiny import make_mlx_lm_target

    target = make_mlx_lm_target("attention", 0, 12)
    engine = BatchGenerator(target, max_tokens=4)
    _install_mtp(engine, target)
    assert hasattr(engine, "get_mtp_stats"), (
        f"on mlx-lm {mlx_lm.__version__} BatchGenerator has no _step: _install_mtp disabled itself (a logged "
        "warning) and the server decodes without MTP"
    )
