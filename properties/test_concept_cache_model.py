"""C2 and C3 on the source NCM's cross-request cache, against a model (issue 44).

A Hypothesis state machine sends requests through one concept cache (`make_concept_cache`) under a small byte
budget, and compares EVERY served generation with uncached generation of the same request (codes and tokens
exactly, logits within the dtype's tolerance) and, after every step, the cache's hits, misses, bytes and entries
with `LRUModel`. What a cache must get right is what it serves, so the counters are the second check, not the only.

A request is a batch of 1-5 rows of one length drawn from a growing pool of prefixes: a batch mixes hits, misses and
repeated rows. The pool grows by new prefixes and by near misses of held ones (the head P[:-1], an extension P+x,
one token changed). Each request draws its model (two that share the generator but not the codec), start (0, 5 or
4 100), namespace (two tenants), seed, temperature and top-k, and PC-1 or the earlier-levels extension; the same
prefix thus comes back under other keys. The cache is saved and read back into a fresh cache or into itself. Budgets
hold from none to a few typical entries, so most runs evict. The instance is drawn like path (a)'s: a drawn dtype
and, in most runs, moved away from initialisation.

The model's order within one request is the reference's, stated here as the contract it judges: every row is looked
up first, in row order; then each distinct missing key is stored once, in order of first appearance.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import mlx.core as mx
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ncm_verify.harness import strategies
from ncm_verify.harness.cache_model import LRUModel
from ncm_verify.harness.checks import assert_equal
from ncm_verify.harness.concept_instances import (
    assert_concept_generations_agree,
    draw_concept_instance,
    model_dtype,
    perturb_parameters,
)
from ncm_verify.protocol import CONCEPT_LEVEL_CACHE_NAMES, concept_api

STEPS = 8
"""Rule calls per run: each request costs two generations (cached and uncached) of a tiny model."""
STARTS = (0, 5, 4100)
NAMESPACES = ("", "tenant-b")
MAX_NEW_PREFIX = 8
BUDGET_POSITIONS = st.one_of(st.integers(8, 24), st.just(0))
"""The budget in cached prefix positions (times the model's K/V bytes per position): a few prefixes (new ones hold
1-8 positions, so 1-24 of them, mostly 2-5), or none."""


@dataclasses.dataclass(frozen=True)
class Slot:
    """What a correct cache keys on: tokens, model (generator and codec), start, namespace."""

    tokens: tuple[int, ...]
    model: int
    start: int
    namespace: str


@dataclasses.dataclass(frozen=True)
class Held:
    """What the model holds for a slot: only its size."""

    nbytes: int


class ConceptCacheMachine(RuleBasedStateMachine):
    """The implementation's concept cache against `LRUModel`; `make_machine` binds the implementation."""

    api = None
    impl = None

    def __init__(self):
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        self.saves = 0
        self.pool: list[tuple[int, ...]] = []
        self.models: list = []
        self.log: list[str] = []
        self.model = LRUModel(0)

    def teardown(self):
        self.folder.cleanup()

    @initialize(data=st.data())
    def build(self, data):
        config, model, how, moved = draw_concept_instance(data, self.api)
        self.models, self.how = [model], how
        codec_seed = getattr(config, "codec_seed", None)
        if codec_seed is not None:  # the same generator, another codec (perturbed alike: codec names sort first)
            self.models.append(self.api.make_concept_model(dataclasses.replace(config, codec_seed=codec_seed + 1)))
            if moved is not None:
                perturb_parameters(self.models[-1], *moved)
        self.layout = self.api.concept_layout(model)
        self.dtype = model_dtype(model)
        self.position_bytes = self.api.concept_kv_bytes(model)
        self.budget = self.position_bytes * data.draw(BUDGET_POSITIONS, label="budget_positions")
        self.cache, self.model = self.api.make_concept_cache(self.budget), LRUModel(self.budget)
        self.pool.append(tuple(data.draw(self.new_prefixes(), label="first_prefix")))
        # every run starts with an entry, then a batch that mixes its hit, repeats and a miss, then an eviction
        self.send(data, [self.pool[0]], *self.draw_key_fields(data))
        if self.model.entries:
            self.mixed_request(data, "nothing")
            self.evict_then_ask_for_the_evicted(data)

    def new_prefixes(self):
        return st.lists(st.integers(0, self.layout.vocab_size - 1), min_size=1, max_size=MAX_NEW_PREFIX)

    def call(self, text: str) -> str:
        """How to reproduce: the instance, the steps so far, this one."""
        steps = "; ".join(self.log[-6:])
        return f"{self.how}; cache of {self.budget} bytes; steps so far (last 6): {steps}; now {text}"

    @rule(data=st.data())
    def add_a_prefix(self, data):
        self.pool.append(tuple(data.draw(self.new_prefixes(), label="new_prefix")))

    @rule(data=st.data(), kind=st.sampled_from(("head", "extension", "one token changed")))
    def add_a_near_miss_of_a_held_prefix(self, data, kind):
        """P[:-1], P+x or P with one token changed, of a held prefix (of the pool while nothing is held)."""
        held = sorted({slot.tokens for slot in self.model.entries}) or self.pool
        tokens = data.draw(st.sampled_from(held), label="near_miss_of")
        vocab = self.layout.vocab_size
        if kind == "head" and len(tokens) > 1:
            near = tokens[:-1]
        elif kind == "extension":
            near = tokens + (data.draw(st.integers(0, vocab - 1), label="appended"),)
        else:
            at = data.draw(st.integers(0, len(tokens) - 1), label="changed_at")
            shift = data.draw(st.integers(1, vocab - 1), label="shift")
            near = tokens[:at] + ((tokens[at] + shift) % vocab,) + tokens[at + 1 :]
        self.pool.append(near)

    def send(self, data, rows, which: int, start: int, namespace: str) -> None:
        """One request of `rows` (one length) through the cache, compared with uncached generation; the model
        then does what the cache must have done (every row looked up, then each distinct miss stored once)."""
        temperature, top_k = data.draw(strategies.concept_sampling(self.layout), label="sampling")
        seed = data.draw(strategies.seeds, label="seed")
        levels = all(hasattr(self.impl, name) for name in CONCEPT_LEVEL_CACHE_NAMES) and data.draw(
            st.booleans(), label="earlier_levels_cached"
        )
        generate = self.impl.generate_cached_levels if levels else self.api.generate_cached_concepts
        model, prefix = self.models[which], mx.array([list(r) for r in rows], dtype=mx.int32)
        keys = self.api.row_keys(seed, len(rows))
        options = dict(temperature=temperature, top_k=top_k, start=start)
        text = (
            f"{generate.__name__}(models[{which}], {[list(r) for r in rows]}, row_keys({seed}, {len(rows)}), "
            f"**{options}, namespace={namespace!r}, cache=cache)"
        )
        self.log.append(text)
        call = self.call(text)
        served = generate(model, prefix, keys, cache=self.cache, namespace=namespace, **options)
        expected = self.api.generate_uncached_concepts(model, prefix, keys, **options)
        assert_concept_generations_agree(served, expected, dtype=self.dtype, label="served vs uncached", call=call)
        slots = [Slot(tuple(r), which, start, namespace) for r in rows]
        missed = [slot for slot in slots if self.model.lookup(slot) is None]
        for slot in dict.fromkeys(missed):
            self.model.store(slot, Held(len(slot.tokens) * self.position_bytes))

    def draw_key_fields(self, data) -> tuple[int, int, str]:
        which = data.draw(st.integers(0, len(self.models) - 1), label="model")
        return (
            which,
            data.draw(st.sampled_from(STARTS), label="start"),
            data.draw(st.sampled_from(NAMESPACES), label="namespace"),
        )

    @rule(data=st.data())
    def request(self, data):
        """A batch of pool rows of one length under drawn key fields."""
        first = data.draw(st.sampled_from(self.pool), label="first_row")
        same_length = [p for p in self.pool if len(p) == len(first)]
        rows = [first, *data.draw(st.lists(st.sampled_from(same_length), max_size=4), label="other_rows")]
        self.send(data, rows, *self.draw_key_fields(data))

    @precondition(lambda self: self.model.entries)
    @rule(data=st.data(), change=st.sampled_from(("nothing", "nothing", "model", "start", "namespace")))
    def request_a_held_prefix_beside_misses(self, data, change):
        """A held prefix, its repeats and a one-token change of it (a miss) in one batch, under the held key's
        fields or with one of them changed (the same tokens under another key: misses). Aimed on purpose, so
        that every run mixes hits and misses whatever else it draws."""
        self.mixed_request(data, change)

    def mixed_request(self, data, change: str) -> None:
        slot = data.draw(st.sampled_from(list(self.model.entries)), label="held")
        tokens, vocab = slot.tokens, self.layout.vocab_size
        at = data.draw(st.integers(0, len(tokens) - 1), label="changed_at")
        changed = tokens[:at] + ((tokens[at] + 1) % vocab,) + tokens[at + 1 :]
        rows = data.draw(st.permutations([tokens, changed, *([tokens] * data.draw(st.integers(0, 2)))]))
        which, start, namespace = slot.model, slot.start, slot.namespace
        if change == "model":
            which = (which + 1) % len(self.models)
        elif change == "start":
            start = STARTS[(STARTS.index(start) + 1) % len(STARTS)]
        elif change == "namespace":
            namespace = NAMESPACES[(NAMESPACES.index(namespace) + 1) % len(NAMESPACES)]
        self.pool.append(changed)
        self.send(data, rows, which, start, namespace)

    @precondition(lambda self: self.model.entries)
    @rule(data=st.data())
    def fill_until_an_eviction_then_ask_for_the_evicted(self, data):
        """New prefixes of its length (fixed-size prompts: where a cache reuses slots) until the least recently used
        entry goes (at most 6 requests), then that prefix again: a cache that evicts must recompute it, never serve
        what took its place."""
        self.evict_then_ask_for_the_evicted(data)

    def evict_then_ask_for_the_evicted(self, data) -> None:
        oldest = next(iter(self.model.entries))
        tokens = st.integers(0, self.layout.vocab_size - 1)
        for _ in range(6):
            if oldest not in self.model.entries:
                break
            length = len(oldest.tokens)
            fresh = tuple(data.draw(st.lists(tokens, min_size=length, max_size=length), label="filler"))
            self.pool.append(fresh)
            self.send(data, [fresh], oldest.model, oldest.start, oldest.namespace)
        self.send(data, [oldest.tokens], oldest.model, oldest.start, oldest.namespace)

    @rule(fresh=st.booleans())
    def save_and_read_back(self, fresh):
        """The cache saved, then loaded into a fresh cache of the same budget or into itself."""
        self.saves += 1
        path = Path(self.folder.name) / f"concept-cache{self.saves}.safetensors"
        self.cache.save(path)
        held = list(self.model.entries.items())
        text = f"cache.save({path.name}); {'a fresh cache' if fresh else 'the same cache'}.load({path.name})"
        self.log.append(text)
        if fresh:
            self.cache, self.model = self.api.make_concept_cache(self.budget), LRUModel(self.budget)
        try:
            loaded = self.cache.load(path)
        except ValueError as error:  # a cache that refuses its own file is wrong, not the test
            raise AssertionError(f"a file this cache saved is refused: {error}\n  call: {self.call(text)}") from error
        assert_equal(loaded, len(held), label="entries loaded", call=self.call(text))
        for slot, payload in held:
            self.model.store(slot, payload)

    @invariant()
    def counters_bytes_and_entries_agree_with_the_model(self):
        if not self.models:
            return
        held = ", ".join(f"{list(s.tokens)} m{s.model} start {s.start} {s.namespace!r}" for s in self.model.entries)
        call = self.call(f"the model holds, least recently used first: [{held}]")
        for name in ("hits", "misses", "nbytes"):
            assert_equal(getattr(self.cache, name), getattr(self.model, name), label=f"{name} vs model", call=call)
        assert_equal(len(self.cache), len(self.model.entries), label="entries held vs model", call=call)


def make_machine(impl, api) -> type[ConceptCacheMachine]:
    """The machine bound to the implementation under test (the `impl` fixture cannot reach a TestCase class)."""
    return type("ConceptCacheMachine", (ConceptCacheMachine,), {"api": api, "impl": impl})


@pytest.mark.claim("C2")
def test_the_concept_cache_serves_what_uncached_generation_gives_under_eviction_mixed_batches_and_reloads(impl):
    api = concept_api(impl)
    examples = min(11, settings.default.max_examples)
    run_state_machine_as_test(
        make_machine(impl, api),
        settings=settings(settings.default, stateful_step_count=STEPS, max_examples=examples),
    )
