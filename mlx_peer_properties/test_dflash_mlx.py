"""dflash-mlx 0.1.8 judged on its own engine (`stream_dflash_generate`), drafter and rollback (`peers.dflash_mlx_spec`).

make install-peers PEER=dflash-mlx && make verify-peers PEERS=dflash-mlx
"""

from __future__ import annotations

import inspect

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from ncm_verify.peers import dflash_mlx_spec as peer

VARIANTS = ("own", "planted")
MORE = settings(max_examples=8)
CHEAP = settings(max_examples=60)
"""Pure-Python properties (the prompt-lookup index) take a millisecond an example."""
"""The rollback property sees the tape finding only in rounds that accept a draft: 8 examples, not 3."""


class Decoding(tuple):
    """(target, drafter, prompt, max_tokens, call), printed by Hypothesis as its prompt and budget, not models."""

    def __new__(cls, *fields):
        return super().__new__(cls, fields)

    def __repr__(self):
        return f"Decoding(prompt={self[2]}, max_tokens={self[3]})"


@st.composite
def decodings(draw, kind: str):
    """A target of `kind`, its drafter, a prompt and a budget; small vocabularies so that drafts are accepted."""
    vocab = draw(st.sampled_from([4, 6, 12]), label="vocab")
    seed = draw(st.integers(0, 2**16), label="weights seed")
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6), label="prompt")
    max_tokens = draw(st.integers(2, 24), label="max_tokens")
    block = draw(st.integers(2, 6), label="block_size")
    target = peer.make_target(kind, seed, vocab)
    drafter = peer.make_drafter(target, seed + 1, block_size=block)
    call = (
        f"target = make_target({kind!r}, {seed}, {vocab}); drafter = make_drafter(target, {seed + 1}, "
        f"block_size={block}); generate(target, drafter, {prompt}, {max_tokens}, ...)"
    )
    note(f"from ncm_verify.peers.dflash_mlx_spec import *; {call}")
    return Decoding(target, drafter, prompt, max_tokens, call)


def first_difference(a: list[int], b: list[int]) -> str:
    index = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first divergent token at {index}: {a[index : index + 4]} vs {b[index : index + 4]}"


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", peer.VERIFY_MODES)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@given(data=st.data())
def test_speculative_decoding_emits_plain_greedy_decoding_token_for_token(kind, mode, variant, data):
    """The engine (block or tree verification) emits its own plain decoding's tokens, and each is the argmax of one
    uncached forward pass over the prompt and the tokens before it: on attention, hybrid GatedDeltaNet and
    sliding-window targets whose ring wraps inside a verify pass."""
    target, drafter, prompt, max_tokens, _ = data.draw(decodings(kind))
    if variant == "planted":
        with peer.planted():
            spec, events, _ = peer.generate(target, drafter, prompt, max_tokens, mode)
    else:
        spec, events, _ = peer.generate(target, drafter, prompt, max_tokens, mode)
    note(f"emitted {spec}; cycles {events[-1].cycles_completed if events else 0}")
    assert events and not any(e.fallback_ar for e in events), "the engine fell back to plain decoding"
    plain = peer.plain(target, prompt, max_tokens)
    assert spec == plain, f"{mode}: speculative {spec} != plain {plain}: {first_difference(spec, plain)}"
    for position, token in enumerate(spec):
        want = int(peer.conditional(target, prompt + spec[:position]).argmax())
        assert token == want, f"token {position}: emitted {token}, the uncached argmax is {want}"


@pytest.mark.peer_property(1)
def test_greedy_speculative_decoding_on_a_hybrid_target_after_a_partial_acceptance():
    """One drawn case of the property above (Hypothesis found it for the suppressed-token property): a hybrid
    target whose rounds accept some drafts; the engine must still emit its plain greedy tokens."""
    target = peer.make_target("hybrid", 37529, 6)
    drafter = peer.make_drafter(target, 37530, block_size=3)
    spec, _, _ = peer.generate(target, drafter, [4, 1, 4, 3], 23, "dflash")
    plain = peer.plain(target, [4, 1, 4, 3], 23)
    assert spec == plain, f"speculative {spec} != plain {plain}: {first_difference(spec, plain)}"


@pytest.mark.peer_property(1)
@pytest.mark.parametrize(
    "kind, mode",
    [(k, m) for k in peer.TARGET_KINDS for m in peer.VERIFY_MODES if k != "hybrid" or m == "ddtree"],
)
@given(data=st.data())
def test_prompt_lookup_drafts_emit_plain_greedy_decoding(kind, mode, data):
    """Every mode drafts by prompt lookup (`engine/copyspec.py`) when the last tokens occur earlier in the prompt
    (block and adaptive modes in place of the drafter's block, tree mode as a branch): with a prompt that repeats a
    pattern, the engine still emits its plain greedy tokens. (Block modes not on the hybrid target: the tape-replay
    finding makes the paths differ there whatever the drafts.)"""
    vocab = data.draw(st.sampled_from([4, 6]), label="vocab")
    seed = data.draw(st.integers(0, 2**16), label="weights seed")
    pattern = data.draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=4), label="pattern")
    prompt = pattern * 4
    target = peer.make_target(kind, seed, vocab)
    drafter = peer.make_drafter(target, seed + 1)
    spec, _, summary = peer.generate(target, drafter, prompt, 20, mode)
    note(f"prompt lookup hits: {summary.copyspec_hits if summary else None}")
    plain = peer.plain(target, prompt, 20)
    assert spec == plain, f"{mode} with prompt lookup {spec} != plain {plain}: {first_difference(spec, plain)}"


def test_prompt_lookup_drafts_in_the_tree_mode_cases_judged():
    """The prompt-lookup property is not vacuous: a case of it that uses prompt-lookup drafts."""
    target = peer.make_target("attention", 3, 6)
    spec, _, summary = peer.generate(target, peer.make_drafter(target, 4), [1, 2, 3, 1, 2, 3, 1, 2], 20, "ddtree")
    assert summary is not None and summary.copyspec_hits > 0, "no prompt-lookup draft was used"
    assert spec == peer.plain(target, [1, 2, 3, 1, 2, 3, 1, 2], 20)


DRAFT_LAYERS = (
    ("full_attention",),
    ("sliding_attention",),
    ("sliding_attention", "full_attention"),
)
"""Draft layer stacks: dflash-mlx's default attention, and the sliding-window layers Gemma 4 DFlash drafters ship."""


@pytest.mark.peer_property(1, 4)
@pytest.mark.parametrize("mode", peer.VERIFY_MODES)
@pytest.mark.parametrize("kind", [kind for kind in peer.TARGET_KINDS if kind != "hybrid"])
@settings(max_examples=5)  # three layouts, each drawn on every target and mode
@given(data=st.data())
def test_greedy_decoding_is_plain_under_every_runtime_option_drafter_layout_and_stop_token(kind, mode, data):
    """Every option of the offline runtime context that must not change greedy output (the drafter's sink and
    window, smaller than the context so that its context cache drops positions; a verify-length cap; a prefill
    step shorter than the prompt), every draft layer layout (sliding-window draft layers, full-context ones) and
    stop tokens handed to both paths: the engine emits its plain decoding's tokens. (Not on the hybrid target: the
    tape-replay finding makes the paths differ whatever the option.)"""
    target, _, prompt, max_tokens, _ = data.draw(decodings(kind))
    vocab = int(peer.conditional(target, prompt).shape[-1])
    layers = data.draw(st.sampled_from(DRAFT_LAYERS), label="draft layer_types")
    window = data.draw(st.integers(2, 4), label="draft sliding_window") if "sliding_attention" in layers else None
    block = data.draw(st.integers(2, 6), label="block_size")
    runtime = {
        "draft_sink_size": data.draw(st.integers(0, 2), label="draft_sink_size"),
        "draft_window_size": data.draw(st.integers(1, 4), label="draft_window_size"),
        "verify_len_cap": data.draw(st.sampled_from([0, 2, 3] if mode == "ddtree" else [0, 1, 2, 3]), label="cap"),
        "prefill_step_size": data.draw(st.sampled_from([1, 2, 2048]), label="prefill_step_size"),
    }
    stops = data.draw(st.lists(st.integers(0, vocab - 1), max_size=1), label="stop_token_ids")
    seed = data.draw(st.integers(0, 2**16), label="drafter seed")
    drafter = peer.make_drafter(target, seed, block_size=block, layer_types=layers, sliding_window=window)
    note(f"make_drafter(target, {seed}, block_size={block}, layer_types={layers}, sliding_window={window}); {runtime}")
    spec, events, _ = peer.generate(
        target, drafter, prompt, max_tokens, mode, runtime=runtime, stop_token_ids=stops or None
    )
    plain = peer.plain(target, prompt, max_tokens, stop_token_ids=stops or None)
    assert spec == plain, f"{mode} with {runtime}, stops {stops}: speculative {spec} != plain {plain}: " + (
        first_difference(spec, plain)
    )


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("mode", peer.VERIFY_MODES)
@settings(max_examples=2)
@given(data=st.data())
def test_full_context_draft_layers_on_a_gemma4_target_emit_plain_greedy_decoding(mode, data):
    """dflash-mlx gives a Gemma 4 target's full-attention draft layers a full-context cache (the rest keep a sink and
    window): with such layers, alone or under a sliding-window one, every mode emits plain greedy decoding."""
    target, _, prompt, max_tokens, _ = data.draw(decodings("sliding-window"))
    layers = data.draw(st.sampled_from(DRAFT_LAYERS[::2]), label="draft layer_types")
    seed = data.draw(st.integers(0, 2**16), label="drafter seed")
    window = 3 if "sliding_attention" in layers else None
    drafter = peer.make_drafter(target, seed, layer_types=layers, sliding_window=window)
    spec, _, _ = peer.generate(target, drafter, prompt, max_tokens, mode)
    plain = peer.plain(target, prompt, max_tokens)
    assert spec == plain, f"{mode}, draft layers {layers}: {spec} != plain {plain}: {first_difference(spec, plain)}"


@pytest.mark.peer_property(4)
@given(data=st.data())
def test_tree_mode_with_a_verify_length_cap_of_one_emits_plain_greedy_decoding(data):
    """`verify_len_cap` (``--verify-len-cap``, any positive integer) caps the tokens verified per target pass; a cap
    of 1 verifies the staged token alone, plain decoding: block mode does so, tree mode must too or refuse it up
    front. (Kept out of the property above, whose other tree cases it would stop.)"""
    target, drafter, prompt, max_tokens, _ = data.draw(decodings("attention"))
    spec, _, _ = peer.generate(target, drafter, prompt, max_tokens, "ddtree", runtime={"verify_len_cap": 1})
    plain = peer.plain(target, prompt, max_tokens)
    assert spec == plain, f"ddtree, verify_len_cap=1: {spec} != plain {plain}: {first_difference(spec, plain)}"


def copied_continuation(tokens: list[int], staged: int, window: int, count: int, forbidden: set[int]):
    """Prompt lookup's rule, written out: the earliest place where the last `window` tokens (the staged one last)
    occurred before, and the `count` tokens that followed it there; None without a full match or with a forbidden
    token among them."""
    tail = (tokens[len(tokens) - (window - 1) :] if window > 1 else []) + [staged]
    if len(tail) < window:
        return None
    for end in range(window, len(tokens) + 1):
        if tokens[end - window : end] == tail:
            copied = tokens[end : end + count]
            ok = len(copied) == count and not set(copied) & forbidden
            return tuple(copied) if ok else None
    return None


@pytest.mark.peer_property(1)
@CHEAP
@given(data=st.data())
def test_prompt_lookup_copies_the_continuation_of_the_earliest_match(data):
    """Tree mode's prompt-lookup drafts (`engine/copyspec.CopySpecIndex`, a hashed index of every window of the
    prompt and the committed tokens): `draft_after` proposes the continuation of the earliest earlier occurrence of
    the last window, in full or not at all, and none holding a suppressed token; a window size of 0 is refused."""
    from dflash_mlx.engine.copyspec import CopySpecIndex

    window = data.draw(st.integers(1, 4), label="window_size")
    alphabet = st.integers(0, data.draw(st.integers(1, 3), label="largest token"))
    prompt = data.draw(st.lists(alphabet, max_size=14), label="prompt")
    committed = data.draw(st.lists(alphabet, max_size=6), label="committed")
    index = CopySpecIndex(prompt, window_size=window)
    index.append_committed(committed)
    tokens = prompt + committed
    for staged in range(4):
        for count in (1, 3):
            forbidden = set(data.draw(st.lists(alphabet, max_size=1), label="forbidden"))
            got = index.draft_after(staged, max_tokens=count, forbidden_tokens=forbidden or None)
            want = copied_continuation(tokens, staged, window, count, forbidden) if len(prompt) > window else None
            assert got == want, (
                f"CopySpecIndex({prompt}, window_size={window}) after {committed}: draft_after({staged}, "
                f"max_tokens={count}, forbidden {forbidden}) = {got}, the rule gives {want}"
            )
    with pytest.raises(ValueError):
        CopySpecIndex(prompt, window_size=0)


@pytest.mark.peer_property(4)
@given(
    layers=st.integers(1, 12),
    pattern=st.sampled_from([None, 2, 3]),
    model_type=st.sampled_from(["gemma4", "gemma4_text"]),
)
def test_draft_configs_get_their_documented_layout_or_are_refused(layers, pattern, model_type):
    """A Gemma 4 DFlash drafter's config without `layer_types` gets the documented layout (sliding-window layers,
    every `sliding_window_pattern`-th one full, default 5, window 512), whether read by `from_dict` or built
    directly; other models get none; a layout of the wrong length, an unknown layer type or sliding layers
    without a window are refused with a ValueError; the target layers read are spread from layer 1 to 3 before
    the last (the middle one for a single draft layer)."""
    import dataclasses

    from dflash_mlx.model import DFlashDraftModelArgs, build_target_layer_ids

    period = pattern or 5
    want = tuple("full_attention" if (i + 1) % period == 0 else "sliding_attention" for i in range(layers))
    config = {**peer.draft_config(8, model_type=model_type), "num_hidden_layers": layers}
    config.update({"sliding_window_pattern": pattern} if pattern else {})
    read = DFlashDraftModelArgs.from_dict(config)
    built = DFlashDraftModelArgs(**{k: v for k, v in config.items() if k in DFlashDraftModelArgs.__annotations__})
    for how, args in (("from_dict", read), ("constructor", built)):
        assert tuple(args.layer_types) == want, (
            f"{model_type}, {layers} layers, pattern {pattern}, {how}: {args.layer_types}"
        )
        assert args.sliding_window == (512 if "sliding_attention" in want else None), f"{how}: {args.sliding_window}"
    assert DFlashDraftModelArgs.from_dict({**config, "model_type": "qwen3"}).layer_types == (), "a qwen3 drafter"
    for bad in ({"layer_types": ["full_attention"] * (layers + 1)}, {"layer_types": ["linear_attention"] * layers},
                {"layer_types": ["sliding_attention"] * layers, "sliding_window": 0}):  # fmt: skip
        with pytest.raises(ValueError):
            dataclasses.replace(read, **{k: tuple(v) if isinstance(v, list) else v for k, v in bad.items()})
    target_layers = build_target_layer_ids(24, layers)
    if layers == 1:
        assert target_layers == [12], f"one draft layer reads {target_layers}"
    else:
        assert len(target_layers) == layers and target_layers[0] == 1 and target_layers[-1] == 21, target_layers
        assert target_layers == sorted(target_layers), f"target layers out of order: {target_layers}"


@pytest.mark.peer_property(2, 3)
@pytest.mark.parametrize("what", ["sampled law", "batch equals rows"])
def test_sampling_and_batches_are_not_offered_by_the_engine(what):
    pytest.skip(
        "not applicable: dflash-mlx's engine decodes greedily (engine/sampling.greedy_tokens_with_mask; no "
        "temperature parameter anywhere in stream_dflash_generate) and serves one request at a time (serve.py "
        "_serve_single); that its server accepts sampling fields and drops them is property 6's finding"
    )


@pytest.mark.peer_property(4)
@pytest.mark.parametrize("kind", [kind for kind in peer.TARGET_KINDS if kind != "hybrid"])
@given(data=st.data())
def test_suppressed_tokens_act_on_the_speculative_path_as_on_plain_decoding(kind, data):
    """`suppress_token_ids`, the one decoding option the engine takes, masks the same tokens on both paths. (Not
    on the hybrid target: there the tape-replay finding makes the paths differ whatever the option.)"""
    target, drafter, prompt, max_tokens, _ = data.draw(decodings(kind))
    vocab = int(peer.conditional(target, prompt).shape[-1])
    suppressed = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=vocab - 1, unique=True))
    spec, _, _ = peer.generate(target, drafter, prompt, max_tokens, suppress_token_ids=suppressed)
    plain = peer.plain(target, prompt, max_tokens, suppress_token_ids=suppressed)
    assert spec == plain, f"suppressing {suppressed}: speculative {spec} != plain {plain}"
    assert not set(spec) & set(suppressed), f"suppressed tokens {set(spec) & set(suppressed)} emitted"


def as_mlx_lm(cache):
    """dflash-mlx's `RecurrentRollbackCache` read as mlx-lm's `ArraysCache` (same slots: conv, recurrent state)."""
    from dflash_mlx.recurrent_rollback_cache import RecurrentRollbackCache
    from mlx_lm.models.cache import ArraysCache

    if isinstance(cache, RecurrentRollbackCache):
        view = ArraysCache(len(cache.cache))
        view.cache = list(cache.cache)
        return view
    return cache


def integer_fields(view):
    """`view` with its integer fields only (offsets, ring geometry): what a recurrent model's roundoff cannot move."""
    from ncm_verify.mlx_lm_real.cache_views import CacheView

    return CacheView(view.kind, {k: a for k, a in view.fields.items() if not np.issubdtype(a.dtype, np.floating)})


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("mode", peer.VERIFY_MODES)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@MORE
@given(data=st.data())
def test_after_every_round_the_rolled_back_caches_equal_caches_rebuilt_from_the_accepted_tokens(kind, mode, data):
    """Each time the engine restores its target caches after a verify pass (block or tree), every cache as the model
    attends to it equals the cache mlx-lm builds from the prompt and the tokens accepted so far, in one pass. On
    attention and sliding-window targets, KV and rotating ring field by field. On the hybrid target, every layer
    downstream of a GatedDeltaNet layer carries that layer's roundoff (per token in the engine, per chunk when
    rebuilt): there, integer fields (offsets) field by field, and the arrays through what they decide, the next
    token's log-probabilities from a copy of the restored caches fed a probe token, within the suite's tolerance
    for a recurrent model (`tolerances.RECURRENT_LOGPROBS`)."""
    import copy

    from dflash_mlx.engine.target_ops import resolve_target_ops

    from ncm_verify.mlx_lm_real.cache_views import attended_view, rebuilt_caches, view_differences
    from ncm_verify.tolerances import RECURRENT_LOGPROBS, tolerance_for

    target, drafter, prompt, max_tokens, call = data.draw(decodings(kind))
    vocab = int(peer.conditional(target, prompt).shape[-1])
    probe = data.draw(st.integers(0, vocab - 1), label="probe")
    ops_class = type(resolve_target_ops(target))
    rounds: list[tuple[int, list, np.ndarray]] = []

    def recorded(name: str):
        own = getattr(ops_class, name)

        def restore(self, cache_entries, **kwargs):
            result = own(self, cache_entries, **kwargs)
            caches = [as_mlx_lm(c) for c in cache_entries]
            length = kwargs.get("target_len") or max(int(getattr(c, "offset", 0) or 0) for c in caches)
            probed = peer.log_softmax(target(mx.array([[probe]]), cache=copy.deepcopy(caches))[0, -1])
            rounds.append((length, [attended_view(c) for c in caches], np.array(probed)))
            return result

        return own, restore

    patches = {name: recorded(name) for name in ("restore_after_acceptance", "restore_after_tree_acceptance")}
    for name, (_, restore) in patches.items():
        setattr(ops_class, name, restore)
    try:
        spec, _, _ = peer.generate(target, drafter, prompt, max_tokens, mode)
    finally:
        for name, (own, _) in patches.items():
            setattr(ops_class, name, own)
    note(f"emitted {spec}; {len(rounds)} restores")
    tokens = prompt + spec
    tolerance = tolerance_for(mx.float32)
    for number, (length, views, probed) in enumerate(rounds):
        assert length <= len(tokens), f"round {number}: the cache claims {length} tokens, {len(tokens)} exist"
        fresh = [attended_view(c) for c in rebuilt_caches(target, [tokens[:length]])]  # make_prompt_cache, fed once
        if any(view.kind == "ArraysCache" for view in views):
            views, fresh = ([integer_fields(v) for v in vs] for vs in (views, fresh))
        found = [
            str(d) for layer, pair in enumerate(zip(views, fresh)) for d in view_differences(*pair, tolerance, layer)
        ]
        want = np.array(peer.conditional(target, tokens[:length] + [probe]))
        off = np.abs(probed - want) > RECURRENT_LOGPROBS.atol + RECURRENT_LOGPROBS.rtol * np.abs(want)
        if off.any():
            found.append(
                f"next-token log-probabilities after probe {probe}: off by up to {np.abs(probed - want).max():.3g}"
            )
        assert not found, (
            f"{mode} round {number}: caches holding {length} tokens differ from caches rebuilt from "
            f"{tokens[:length]}:\n    " + "\n    ".join(found[:6]) + f"\n  call: {call}"
        )


SAMPLING_FIELDS = (
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
    "logit_bias", "seed",
)  # fmt: skip


def request_fields_read(module_file: str, method: str) -> set[str]:
    """The request-body keys `method` of a module reads (``body.get("key", ...)``), read from its source: the
    server module does not import here (see the import finding), its code is still what users run."""
    import ast

    tree = ast.parse(open(module_file, encoding="utf-8").read())
    function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == method)
    return {
        call.args[0].value
        for call in ast.walk(function)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "get"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "body"
        and call.args
        and isinstance(call.args[0], ast.Constant)
    }


@pytest.mark.peer_property(6)
def test_every_sampling_field_the_server_reads_reaches_the_speculative_engine():
    """The OpenAI-compatible server reads a request's sampling fields; the DFlash path must act on them or refuse
    them. Reads: `DFlashAPIHandler._load_completion_fields` (serve.py); acts: a parameter of the engine entry its
    DFlash path calls (`server/runtime.py` `serve_dflash_request` -> `runtime.stream_dflash_generate`)."""
    import dflash_mlx
    from dflash_mlx.runtime import stream_dflash_generate

    serve = f"{dflash_mlx.__path__[0]}/serve.py"
    read = sorted(request_fields_read(serve, "_load_completion_fields") & set(SAMPLING_FIELDS))
    assert read, "the server reads no sampling field: the property has nothing to judge"
    accepted = set(inspect.signature(stream_dflash_generate).parameters)
    dropped = [field for field in read if field not in accepted]
    assert not dropped, (
        f"the server reads {read} from a request, and the speculative engine takes none of {dropped}: "
        f"dropped without an error (engine parameters: {sorted(accepted)})"
    )


def test_the_server_imports_with_the_mlx_lm_its_metadata_admits():
    """dflash-mlx declares mlx-lm>=0.31.0; its server must import with the newest release that range admits."""
    import mlx_lm

    try:
        import dflash_mlx.serve  # noqa: F401
    except ImportError as error:
        raise AssertionError(f"dflash_mlx.serve does not import with mlx-lm {mlx_lm.__version__}: {error}") from None
