"""yunshu 0.1.5's speculative decoder (`yunshu_engine.speculative_decoder.SpeculativeDecoder`), driven directly.

Its loop (`generate`): prefill both models, the first token from the target, then rounds of a draft model drafting
K tokens at its `draft_temperature`, one target pass over [last token, drafts] (`verify_draft`), acceptance by
argmax match at temperature 0 or by ``U < min(threshold, p(x)/q(x))`` above it, a bonus or correction token from
the target, and rollback by `mlx_lm.models.cache.trim_prompt_cache` (draft cache: a snapshot of offsets and arrays).
`batch_verify_drafts` verifies several requests' drafts, one request's cache each. Targets and drafters are
mlx-lm's own models at tiny sizes (`mlx_tiny`); the tokenizer is None (no EOS). `planted()` makes every
`trim_prompt_cache` the loop calls trim one entry fewer.
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Iterator
from unittest import mock

import mlx.core as mx
import numpy as np

from ncm_verify.peers.mlx_tiny import MLX_LM_KINDS, log_softmax, make_mlx_lm_target

PACKAGE = "yunshu"
VERSION = "0.1.5"
TARGET_KINDS = MLX_LM_KINDS


def make_target(kind: str, seed: int, vocab: int = 12):
    return make_mlx_lm_target(kind, seed, vocab)


def make_drafter(seed: int, vocab: int = 12):
    """The draft model: an attention-only qwen3 of the same vocabulary, its own weights."""
    return make_mlx_lm_target("attention", seed, vocab)


class EosTokenizer:
    """What `SpeculativeDecoder` reads of a tokenizer: its `eos_token_id`."""

    def __init__(self, eos_token_id: int):
        self.eos_token_id = eos_token_id


def decoder(target, drafter, draft_length: int = 3, draft_temperature: float = 1.0, rng_seed: int | None = 0,
            eos: int | None = None):  # fmt: skip
    """yunshu's `SpeculativeDecoder` (no tokenizer, so no EOS, unless `eos`), its acceptance coins from
    ``random.Random(rng_seed)`` (None: the unseeded generator yunshu gives it)."""
    from yunshu_engine.speculative_decoder import SpecDecodingConfig, SpeculativeDecoder

    config = SpecDecodingConfig(draft_length=draft_length, draft_temperature=draft_temperature)
    spec = SpeculativeDecoder(target, drafter, None if eos is None else EosTokenizer(eos), config=config)
    if rng_seed is not None:
        spec.rng = random.Random(rng_seed)
    return spec


def generate(target, drafter, prompt: list[int], max_tokens: int, draft_length: int = 3, temperature: float = 0.0,
             **options) -> list[int]:  # fmt: skip
    """yunshu's `SpeculativeDecoder.generate`; `options` are its penalties and `logit_bias`."""
    spec = decoder(target, drafter, draft_length)
    return [int(t) for t in spec.generate(mx.array([prompt]), max_tokens, temperature, **options)]


def plain(target, prompt: list[int], max_tokens: int, logit_bias: dict[int, float] | None = None) -> list[int]:
    """Plain greedy decoding of the target: mlx-lm's `generate_step` with its logits processors."""
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_logits_processors

    processors = make_logits_processors(logit_bias=logit_bias)
    steps = generate_step(
        mx.array(prompt), target, max_tokens=max_tokens, sampler=lambda x: mx.argmax(x, axis=-1),
        logits_processors=processors,
    )  # fmt: skip
    return [int(token) for token, _ in steps]


def conditional(target, tokens: list[int]) -> mx.array:
    """The target's log-probabilities ``[V]`` of the token after `tokens`, from one uncached forward pass."""
    return log_softmax(target(mx.array([tokens]))[0, -1])


def prefilled(model, tokens: list[int]) -> list:
    """mlx-lm caches of `model` holding `tokens` (what `verify_draft` expects: the last token cached)."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    model(mx.array([tokens]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


class ScriptedRandom:
    """A `random.Random` stand-in whose every `random()` is `uniform` (the acceptance coins)."""

    def __init__(self, uniform: float):
        self.uniform = uniform

    def random(self) -> float:
        return self.uniform


class RecordingTempSampler:
    """Stands in for `_build_temp_sampler`'s numpy sampler: records the row handed to it (the law it would draw
    from is softmax(row / T)) and returns its argmax."""

    def __init__(self):
        self.rows: list[np.ndarray] = []

    def build(self, temperature, **_):
        def sample(row):
            self.rows.append(np.array(row.astype(mx.float32)).reshape(-1) / temperature)
            return mx.argmax(row.reshape(-1), keepdims=True)

        return sample


class RecordingMlx:
    """`mlx.core` as `speculative_decoder` sees it, recording each `minimum` (the rule's acceptance ratios
    ``min(threshold, p(x)/q(x))``); everything else is mlx.core's own."""

    def __init__(self):
        self.minimums: list[np.ndarray] = []

    def __getattr__(self, name: str):
        return getattr(mx, name)

    def minimum(self, a, b):
        result = mx.minimum(a, b)
        self.minimums.append(np.array(result))
        return result


def round_law(spec, target, context: list[int], draft_logprobs: np.ndarray, draft_law: np.ndarray,
              temperature: float) -> np.ndarray:  # fmt: skip
    """The exact law of the first token a `verify_draft` round emits after `context` with one draft x drawn from
    `draft_law` and handed to the rule with its log-probability `draft_logprobs[x]` (as `generate` does: the draft
    model's untempered log-softmax): per x, the acceptance ratio the rule computes (its coin accepts iff U < ratio,
    checked at the ratio and the float32 below it) and the law its correction sampler is handed on rejection."""
    from yunshu_engine import batched_engine, speculative_decoder
    from yunshu_engine.speculative_decoder import DraftResult

    vocab = draft_logprobs.shape[-1]
    q = np.asarray(draft_law, dtype=np.float64)

    def run(x: int, uniform: float):
        recorder, recording = RecordingTempSampler(), RecordingMlx()
        spec.rng = ScriptedRandom(uniform)
        draft = DraftResult(token_ids=[x], logprobs=[float(draft_logprobs[x])])
        with (
            mock.patch.object(batched_engine, "_build_temp_sampler", recorder.build),
            mock.patch.object(speculative_decoder, "mx", recording),
        ):
            result = spec.verify_draft(draft, mx.array([[context[-1]]]), prefilled(target, context), temperature)
        return result, recording.minimums, recorder.rows

    law = np.zeros(vocab)
    below_one = float(np.nextafter(np.float32(1.0), np.float32(0.0)))
    for x in np.flatnonzero(q > 0):
        result, ratios, rows = run(int(x), below_one)
        accept = float(min(ratios[0][0], 1.0)) if ratios else float(result.accepted_count)  # greedy: no ratio
        if ratios and 0.0 < accept < 1.0:
            at, _, _ = run(int(x), accept)
            under, _, _ = run(int(x), float(np.nextafter(np.float32(accept), np.float32(0.0))))
            assert at.accepted_count == 0 and under.accepted_count == 1, (
                f"draft {x}: the coin does not accept exactly below the ratio {accept} the rule computed"
            )
        residual = np.zeros(vocab)
        if result.accepted_count == 0:
            row = rows[-1].astype(np.float64)
            residual = np.exp(row - row.max())
            residual /= residual.sum()
        law += q[x] * (accept * np.eye(vocab)[x] + (1.0 - accept) * residual)
    return law


def verify_rows(spec, target, contexts: list[list[int]], drafts: list[list[int]], draft_logprobs: list[list[float]],
                temperature: float, rng_seed: int, record: bool = False,
                response_format: str | None = None):  # fmt: skip
    """`batch_verify_drafts` over the requests, and `verify_draft` on each alone (same coins, fresh caches). With
    `record`, each result comes with the law its correction sampler was handed (softmax of the row it got). With
    `response_format`, the decoder holds that grammar's constraint, fresh for the batch and for each request alone."""
    from yunshu_engine import batched_engine
    from yunshu_engine.speculative_decoder import DraftResult

    results = [DraftResult(token_ids=d, logprobs=lp) for d, lp in zip(drafts, draft_logprobs)]
    recorder = RecordingTempSampler()
    patch = mock.patch.object(batched_engine, "_build_temp_sampler", recorder.build) if record else None

    def law(row: np.ndarray) -> np.ndarray:
        weights = np.exp(row.astype(np.float64) - row.max())
        return weights / weights.sum()

    def constrain() -> None:
        if response_format is not None:
            tokenizer, make = grammar(response_format)
            spec.tokenizer, spec.constraint, spec._eos_ids = tokenizer, make(), {tokenizer.eos_token_id}

    with patch or contextlib.nullcontext():
        constrain()
        spec.rng = random.Random(rng_seed)
        batched = spec.batch_verify_drafts(
            [(r, mx.array([[c[-1]]]), prefilled(target, c)) for r, c in zip(results, contexts)], temperature
        )
        batched_laws = [law(row) for row in recorder.rows]  # one sampler call per request, in order
        alone = []
        spec.rng = random.Random(rng_seed)
        for r, c in zip(results, contexts):
            constrain()
            alone.append(spec.verify_draft(r, mx.array([[c[-1]]]), prefilled(target, c), temperature))
            if record:
                alone[-1] = (alone[-1], law(recorder.rows[-1]))
    if record:
        return list(zip(batched, batched_laws)), alone
    return batched, alone


@contextlib.contextmanager
def recorded_target_caches(target) -> Iterator[list]:
    """The target caches `generate` makes (`make_prompt_cache(self.target)`), recorded as made."""
    from mlx_lm.models import cache as mlx_cache

    own, made = mlx_cache.make_prompt_cache, []

    def make(model, *args, **kwargs):
        result = own(model, *args, **kwargs)
        if model is target:
            made.append(result)
        return result

    with mock.patch.object(mlx_cache, "make_prompt_cache", make):
        yield made


def caches_at_rounds(spec) -> list[tuple[int, list]]:
    """Wraps `spec.verify_draft` to record, at each round's entry, a copy of the target cache and the offset it
    claims (its attention layers' largest)."""
    own, rounds = spec.verify_draft, []

    def verify(draft, input_ids, cache, *args, **kwargs):
        rounds.append((max(int(getattr(c, "offset", 0) or 0) for c in cache), copy.deepcopy(cache)))
        return own(draft, input_ids, cache, *args, **kwargs)

    spec.verify_draft = verify
    return rounds


def planted() -> contextlib.AbstractContextManager:
    """Every `trim_prompt_cache` the loop calls trims one entry fewer: one rejected entry stays attended."""
    from mlx_lm.models import cache

    own = cache.trim_prompt_cache

    def trim_one_fewer(prompt_cache, num_tokens):
        return own(prompt_cache, max(num_tokens - 1, 0))

    return mock.patch.object(cache, "trim_prompt_cache", trim_one_fewer)


CHOICES = ("abcab", "bad", "cabbed", "aced", "ebbed")
RESPONSE_FORMATS = {
    "choice": ({"type": "choice", "choices": list(CHOICES)}, "abcde"),
    "json schema": (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        '{}"a:1',
    ),
    "any string": ({"type": "regex", "pattern": "[a-e]*"}, "abcde"),
}
"""Response formats yunshu serves (`engine_sampling._build_grammar_constraint`: a choice list, a JSON schema, a
regular expression), each with the alphabet of its `CharTokenizer`. "any string" allows every token everywhere."""


class CharTokenizer:
    """What yunshu's grammar constraints read of a tokenizer: token i is the character `letters[i]`, the last
    one (`eos_token_id`, ``len(letters)``) is the end of sequence and decodes to nothing."""

    def __init__(self, letters: str = "abcde"):
        if not letters or len(set(letters)) != len(letters):
            raise ValueError(f"letters: expected distinct characters, got {letters!r}")
        self.letters, self.eos_token_id = letters, len(letters)

    def get_vocab(self) -> dict[str, int]:
        return {letter: i for i, letter in enumerate(self.letters)} | {"</s>": self.eos_token_id}

    def decode(self, ids: list[int]) -> str:
        return "".join(self.letters[i] if i < len(self.letters) else "" for i in ids)


def grammar(response_format: str):
    """`RESPONSE_FORMATS[response_format]`'s tokenizer, and a factory of the constraint yunshu's engine wires into
    its speculative decoder for it (`engine_sampling._build_grammar_constraint`, as `engine_speculative` calls it)."""
    from yunshu_engine.engine_sampling import _build_grammar_constraint

    if response_format not in RESPONSE_FORMATS:
        raise ValueError(f"response_format: expected one of {sorted(RESPONSE_FORMATS)}, got {response_format!r}")
    spec, letters = RESPONSE_FORMATS[response_format]
    tokenizer = CharTokenizer(letters)
    return tokenizer, lambda: _build_grammar_constraint(spec, tokenizer)


def constrained_decoder(target, drafter, draft_length: int, response_format: str):
    """`SpeculativeDecoder` with the response format's constraint (coins from ``random.Random(0)``); the target's
    vocabulary is the tokenizer's letters and EOS."""
    tokenizer, constraint = grammar(response_format)
    spec = decoder(target, drafter, draft_length)
    spec.tokenizer, spec.constraint, spec._eos_ids = tokenizer, constraint(), {tokenizer.eos_token_id}
    return spec


def plain_constrained(target, prompt: list[int], max_tokens: int, response_format: str) -> list[int]:
    """Plain grammar-constrained greedy decoding: each token the argmax of one uncached pass over the tokens the
    grammar allows after the text so far (a fresh constraint advanced by each token), ending at EOS."""
    tokenizer, make = grammar(response_format)
    constraint, out = make(), list[int]()
    while len(out) < max_tokens:
        row = np.array(conditional(target, prompt + out))
        allowed = constraint.get_allowed_tokens(tokenizer, out)
        out.append(max(allowed, key=lambda token: row[token]))
        if out[-1] == tokenizer.eos_token_id:
            break
        constraint.advance(tokenizer.decode([out[-1]]))
    return out


def grammar_violation(tokens: list[int], response_format: str) -> str | None:
    """Where `tokens` first leave the response format's grammar (a token its constraint does not allow), or None."""
    tokenizer, make = grammar(response_format)
    constraint = make()
    for position, token in enumerate(tokens):
        allowed = constraint.get_allowed_tokens(tokenizer, tokens[:position])
        if token not in allowed:
            return f"token {position} ({token}, {tokenizer.decode(tokens[: position + 1])!r}) not in {sorted(allowed)}"
        if token == tokenizer.eos_token_id:
            return None if position == len(tokens) - 1 else f"tokens after the EOS at {position}"
        constraint.advance(tokenizer.decode([token]))
    return None


class CancelAfter:
    """A cancellation event (`generate`'s `cancel_event`: anything with `is_set`) that turns set at its n-th
    query, so that cancellation lands inside a round."""

    def __init__(self, queries: int):
        self.queries, self.asked = queries, 0

    def is_set(self) -> bool:
        self.asked += 1
        return self.asked > self.queries


def draft_caches_at_rounds(spec, drafter) -> list[tuple[int, list]]:
    """Records, at each round's start (`_snapshot_cache` of the draft cache), a copy of the draft cache and the
    offset it claims (its attention layers' largest): after the previous round's restore and re-feed."""
    own, rounds = spec._snapshot_cache, []

    def snapshot(cache):
        rounds.append((max(int(getattr(c, "offset", 0) or 0) for c in cache), copy.deepcopy(cache)))
        return own(cache)

    spec._snapshot_cache = snapshot
    return rounds
