"""The prefix cache against a model: a Hypothesis state machine drives the
implementation's `PrefixCache` (store, lookup, eviction under a byte budget,
save, load, a weight change, tenant namespaces) and a plain-Python LRU cache side
by side, and compares every observable after every step: the payload a lookup
serves, the hit/miss/eviction counters, the bytes and entries held.

Keys carry token ids up to 2**20 and prefixes of varying lengths, with the near
misses an exact-match contract requires (P[:-1], P+x, one token changed, also by
exactly 2**16). Payloads are small synthetic K/V arrays (float32, float16,
bfloat16: the key's dtype) whose every value names the store that wrote it, so a
lookup that serves the wrong entry cannot pass. Keys come only from the
implementation's `keys_for`, under four models of the tiny fixture config: two
differing by a weight update, two by dtype.

The machine runs inside a plain test function, so that it gets the `impl` fixture
and its claim marker, and the evidence plugin counts its runs as examples.
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
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from mlx.utils import tree_flatten, tree_unflatten

from ncm_verify.harness.cache_model import LRUModel
from ncm_verify.harness.checks import assert_equal
from ncm_verify.protocol import ncm_api
from ncm_verify.reference.ncm.config import DTYPES, fixture_fields

TOKEN_IDS = st.integers(0, 2**20 - 1)
"""Beyond any 16-bit packing: a key that keeps only the low 16 bits aliases id t and t ^ 2**16."""
NAMESPACE = st.sampled_from(("", "tenant-a", "tenant-b"))
HEADS, LAYERS = st.integers(1, 3), st.integers(1, 2)
MODEL_VARIANTS = ((False, "float32"), (True, "float32"), (False, "float16"), (False, "bfloat16"))
"""(weights updated?, dtype) of the models a run switches between; 0 and 1 differ only by a weight update."""
STEPS = 50
"""Rule calls per run; with at most `BURST` stores each, fewer than 4096 stores, so every payload is distinct."""
BURST = 12
"""The most stores one rule makes while it fills the cache until something is evicted."""
AFTER = "after the last step of the state machine printed below"
HEAD_DIM = 2
MAX_PREFIX = 6
BUDGETS = st.one_of(st.integers(300, 1500), st.integers(0, 300))
"""Bytes; a float32 payload holds 16 to 576 bytes here, so a budget keeps from none to a few dozen entries;
mostly several, where the eviction order shows."""


@dataclasses.dataclass(frozen=True)
class Slot:
    """What a correct cache keys on: the tokens, which model (weights, dtype), the namespace."""

    tokens: tuple[int, ...]
    model: int
    namespace: str


@dataclasses.dataclass(frozen=True)
class Payload:
    """A synthetic K/V entry in the key's dtype: layer l's K is filled with 4 * (uid % 64) + 2l and its V with
    4 * (uid // 64) + 2l + 1, integers below 256 and so exact even in bfloat16; (K, V) tells uids below 4096 apart."""

    uid: int
    length: int
    heads: int
    layers: int
    dtype: str

    def values(self, layer: int) -> tuple[int, int]:
        return 4 * (self.uid % 64) + 2 * layer, 4 * (self.uid // 64) + 2 * layer + 1

    def arrays(self) -> tuple[tuple[mx.array, mx.array], ...]:
        shape, dtype = (self.heads, self.length, HEAD_DIM), DTYPES[self.dtype]
        return tuple(
            tuple(mx.full(shape, value, dtype=dtype) for value in self.values(layer)) for layer in range(self.layers)
        )

    @property
    def nbytes(self) -> int:
        return 2 * self.layers * self.heads * self.length * HEAD_DIM * DTYPES[self.dtype].size


@dataclasses.dataclass(frozen=True)
class SavedFile:
    """A file the cache under test wrote, and what the model held when it did."""

    path: Path
    held: tuple[tuple[Slot, Payload], ...]

    def __repr__(self) -> str:
        return f"SavedFile({self.path.name}, {len(self.held)} entries)"


def load_file(cache, saved: SavedFile) -> None:
    """`cache.load` of a file the implementation saved: it must load every entry, never refuse it."""
    call = f"PrefixCache.load({saved})"
    try:
        loaded = cache.load(saved.path)
    except ValueError as error:  # a cache that refuses its own file is wrong, not the test
        raise AssertionError(f"a file this cache saved is refused: {error}\n  call: {call}") from error
    assert_equal(loaded, len(saved.held), label="entries loaded", call=call)


def make_weight_change(api, config):
    """A model of `config` whose first weight moved by 0.5: an updated checkpoint."""
    model = api.make_model(config)
    name, value = tree_flatten(model.parameters())[0]
    flat = value.reshape(-1)
    moved = mx.concatenate([flat[:1] + 0.5, flat[1:]]).reshape(value.shape).astype(value.dtype)
    model.update(tree_unflatten([(name, moved)]))
    return model


def one_token_changed(tokens: tuple[int, ...], change) -> st.SearchStrategy[tuple[int, ...]]:
    """`tokens` with the token at a drawn position passed through `change(token) -> strategy of tokens`."""
    return st.integers(0, len(tokens) - 1).flatmap(
        lambda i: change(tokens[i]).map(lambda t: tokens[:i] + (t,) + tokens[i + 1 :])
    )


def near_misses(tokens: tuple[int, ...]) -> st.SearchStrategy[tuple[int, ...]]:
    """The prefixes an exact-match cache must tell from `tokens`: one token changed by exactly 2**16 (equal
    in the low 16 bits) or to any other id, P[:-1], P+x."""
    options = [
        one_token_changed(tokens, lambda t: st.just(t ^ 2**16)),
        one_token_changed(tokens, lambda t: TOKEN_IDS.filter(lambda other: other != t)),
    ]
    if len(tokens) > 1:
        options.append(st.just(tokens[:-1]))
    if len(tokens) < MAX_PREFIX:
        options.append(TOKEN_IDS.map(lambda t: tokens + (t,)))
    return st.one_of(options)


def slot_near_misses(slot: Slot) -> st.SearchStrategy[Slot]:
    """`slot` with one field changed: its tokens to a near miss, its model (also its weight update alone,
    models 0 and 1), or its namespace."""
    return st.one_of(
        near_misses(slot.tokens).map(lambda tokens: dataclasses.replace(slot, tokens=tokens)),
        st.sampled_from([m for m in range(len(MODEL_VARIANTS)) if m != slot.model]).map(
            lambda model: dataclasses.replace(slot, model=model)
        ),
        st.just(dataclasses.replace(slot, model=1 - slot.model)) if slot.model < 2 else st.nothing(),
        NAMESPACE.filter(lambda name: name != slot.namespace).map(
            lambda name: dataclasses.replace(slot, namespace=name)
        ),
    )


class PrefixCacheMachine(RuleBasedStateMachine):
    """The implementation's cache and `LRUModel`, fed the same operations; `make_machine` binds the models."""

    api = None
    models: tuple = ()
    prefixes = Bundle("prefixes")
    files = Bundle("files")

    def __init__(self):
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        self.current, self.uid, self.saves = 0, 0, 0
        self.cache, self.model = None, None
        self.stored: set[Slot] = set()

    def teardown(self):
        self.folder.cleanup()

    def key_of(self, slot: Slot):
        return self.cache.keys_for(self.models[slot.model], [slot.tokens], slot.namespace)[0]

    def describe(self, slot: Slot) -> str:
        return f"lookup of {list(slot.tokens)} under model {slot.model}, namespace {slot.namespace!r}"

    def check_lookup(self, slot: Slot, cache=None, model: LRUModel | None = None) -> None:
        """The implementation serves exactly what the model serves: nothing, or the same payload
        (`cache` and `model` default to the machine's own)."""
        cache, model = cache or self.cache, model or self.model
        expected, served = model.lookup(slot), cache.lookup(self.key_of(slot))
        call = self.describe(slot)
        assert_equal(served is not None, expected is not None, label="served (hit) vs model", call=call)
        if expected is None:
            return
        arrays = expected.arrays()
        assert_equal(len(served), len(arrays), label="layers served", call=call)
        for layer, ((k, v), (want_k, want_v)) in enumerate(zip(served, arrays)):
            assert_equal(str(k.dtype), str(want_k.dtype), label=f"dtype of layer {layer}", call=call)
            assert_equal(k, want_k, label=f"K of layer {layer} (4 * (store uid % 64) + 2 * layer)", call=call)
            assert_equal(v, want_v, label=f"V of layer {layer} (4 * (store uid // 64) + 2 * layer + 1)", call=call)

    def reset(self, max_bytes: int) -> None:
        self.cache, self.model = self.api.PrefixCache(max_bytes=max_bytes), LRUModel(max_bytes)

    @initialize(max_bytes=BUDGETS)
    def start(self, max_bytes):
        self.reset(max_bytes)

    def store_payload(self, slot: Slot, heads: int, layers: int) -> tuple[int, ...]:
        """Store a fresh payload (its uid names this store) under `slot` in both caches; returns its tokens."""
        self.uid += 1
        dtype = self.models[slot.model].config.dtype
        payload = Payload(self.uid, len(slot.tokens), heads, layers, dtype)
        self.cache.store(self.key_of(slot), payload.arrays())
        self.model.store(slot, payload)
        self.stored.add(slot)
        return slot.tokens

    @rule(
        target=prefixes,
        tokens=st.lists(TOKEN_IDS, min_size=1, max_size=MAX_PREFIX),
        namespace=NAMESPACE,
        heads=HEADS,
        layers=LAYERS,
    )
    def store_a_new_prefix(self, tokens, namespace, heads, layers):
        return self.store_payload(Slot(tuple(tokens), self.current, namespace), heads, layers)

    @rule(data=st.data())
    def store_new_prefixes_until_an_eviction(self, data):
        """Fill the cache until it evicts (up to `BURST` stores), so that the order of eviction shows now."""
        self.fill_until_an_eviction(data)

    @precondition(lambda self: len(self.model.entries) >= 2)
    @rule(data=st.data(), refresh=st.sampled_from(("replace", "lookup")))
    def refresh_the_least_recent_key_then_evict(self, data, refresh):
        """The least recently used key made the most recent (replaced or hit), then the cache filled until it
        evicts and the key looked up: a cache that ignores the refresh evicts it first. Aimed on purpose, so that
        whether recency bugs are found does not hang on the derandomized draw reaching this order by chance."""
        oldest = next(iter(self.model.entries))
        if refresh == "replace":
            self.store_payload(oldest, 1, 1)
        else:
            self.check_lookup(oldest)
        self.fill_until_an_eviction(data)
        self.check_lookup(oldest)

    def fill_until_an_eviction(self, data) -> None:
        evictions = self.model.evictions
        for _ in range(BURST):
            if self.model.evictions > evictions:
                break
            tokens = data.draw(st.lists(TOKEN_IDS, min_size=1, max_size=MAX_PREFIX), label="burst_prefix")
            self.store_payload(Slot(tuple(tokens), self.current, ""), 1, 1)

    @rule(target=prefixes, prefix=prefixes, data=st.data(), namespace=NAMESPACE, heads=HEADS, layers=LAYERS)
    def store_a_near_miss(self, prefix, data, namespace, heads, layers):
        near_miss = data.draw(near_misses(prefix), label="near_miss")
        return self.store_payload(Slot(near_miss, self.current, namespace), heads, layers)

    @precondition(lambda self: self.model.entries)
    @rule(data=st.data(), heads=HEADS, layers=LAYERS)
    def replace_a_held_key(self, data, heads, layers):
        """A held key (least recently used first) gets a new payload and becomes the most recently used."""
        self.store_payload(data.draw(st.sampled_from(list(self.model.entries)), label="held_key"), heads, layers)

    @rule(prefix=prefixes, namespace=NAMESPACE)
    def lookup(self, prefix, namespace):
        self.check_lookup(Slot(prefix, self.current, namespace))

    @precondition(lambda self: self.model.entries)
    @rule(data=st.data())
    def lookup_a_held_key(self, data):
        """A hit (least recently used first): it must serve the payload and make the key the most recently used."""
        self.check_lookup(data.draw(st.sampled_from(list(self.model.entries)), label="held_key"))

    @precondition(lambda self: self.model.entries)
    @rule(data=st.data())
    def lookup_a_near_miss_of_a_held_key(self, data):
        """A held key with its tokens (a near miss), model or namespace changed: it must miss unless held too."""
        held = data.draw(st.sampled_from(list(self.model.entries)), label="held_key")
        self.check_lookup(data.draw(slot_near_misses(held), label="near_miss"))

    @precondition(lambda self: self.stored)
    @rule(data=st.data())
    def lookup_every_stored_key(self, data):
        """Which keys survived eviction, in a drawn order (each lookup refreshes recency in both)."""
        for slot in data.draw(st.permutations(sorted(self.stored, key=repr)), label="lookup_order"):
            self.check_lookup(slot)

    @rule(model=st.integers(0, len(MODEL_VARIANTS) - 1))
    def switch_model(self, model):
        """Serve updated weights (another fingerprint) or another dtype: the other models' entries must miss."""
        self.current = model

    @rule(target=files)
    def save(self):
        return self.save_and_read_back()

    def save_and_read_back(self) -> SavedFile:
        self.saves += 1
        path = Path(self.folder.name) / f"cache{self.saves}.safetensors"
        self.cache.save(path)
        saved = SavedFile(path, tuple(self.model.entries.items()))
        self.check_round_trip(saved)
        return saved

    @rule(
        tokens=st.lists(TOKEN_IDS, min_size=1, max_size=MAX_PREFIX), namespace=st.sampled_from(("tenant-a", "tenant-b"))
    )
    def store_under_a_tenant_then_save(self, tokens, namespace):
        """A tenant's entry saved and read back: it must serve under its own namespace, and only there. Aimed on
        purpose, so that a file that drops namespaces is found whatever else the derandomized run draws."""
        slot = Slot(tuple(tokens), self.current, namespace)
        self.store_payload(slot, 1, 1)
        self.save_and_read_back()

    def check_round_trip(self, saved: SavedFile) -> None:
        """A new cache of the same budget, loaded from the file, serves every saved entry under its own key."""
        reader, model = self.api.PrefixCache(max_bytes=self.model.max_bytes), LRUModel(self.model.max_bytes)
        load_file(reader, saved)
        for slot, payload in saved.held:
            model.store(slot, payload)
        for slot, _ in saved.held:
            self.check_lookup(slot, reader, model)

    def load(self, saved: SavedFile) -> None:
        load_file(self.cache, saved)
        for slot, payload in saved.held:
            self.model.store(slot, payload)
        # every loaded entry still held serves its saved payload; looked up in the file's LRU order, so the
        # recency order stays the file's
        for slot in [slot for slot, _ in saved.held if slot in self.model.entries]:
            self.check_lookup(slot)

    @rule(saved=files, max_bytes=BUDGETS)
    def load_into_a_new_cache(self, saved, max_bytes):
        self.reset(max_bytes)
        self.load(saved)

    @rule(saved=files)
    def load_into_this_cache(self, saved):
        self.load(saved)

    @invariant()
    def counters_bytes_and_entries_agree_with_the_model(self):
        held = ", ".join(
            f"{list(slot.tokens)} model {slot.model} {slot.namespace!r}: {payload.nbytes} B"
            for slot, payload in self.model.entries.items()
        )
        call = f"{AFTER}; the model holds, least recently used first: [{held}]"
        for name in ("hits", "misses", "evictions", "nbytes"):
            assert_equal(getattr(self.cache, name), getattr(self.model, name), label=f"{name} vs model", call=call)
        assert_equal(len(self.cache), len(self.model.entries), label="entries held vs model", call=call)


def make_machine(api, models) -> type[PrefixCacheMachine]:
    """The machine bound to the implementation under test (the `impl` fixture cannot reach a TestCase class)."""
    return type("PrefixCacheMachine", (PrefixCacheMachine,), {"api": api, "models": tuple(models)})


def machine_settings() -> settings:
    """The loaded profile's settings (examples, derandomization, phases) with runs of up to `STEPS` steps."""
    return settings(settings.default, stateful_step_count=STEPS)


def make_models(api) -> tuple:
    """`MODEL_VARIANTS` of the tiny fixture config, in that order."""
    fields = fixture_fields("ncm_tiny")
    configs = [api.NCMConfig(**{**fields, "dtype": dtype}) for _, dtype in MODEL_VARIANTS]
    return tuple(
        make_weight_change(api, config) if changed else api.make_model(config)
        for config, (changed, _) in zip(configs, MODEL_VARIANTS)
    )


@pytest.mark.claim("C15")
def test_the_prefix_cache_serves_stores_evicts_and_persists_as_a_byte_bounded_lru_model(impl):
    api = ncm_api(impl)
    run_state_machine_as_test(make_machine(api, make_models(api)), settings=machine_settings())
