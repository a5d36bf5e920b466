"""C3: partial-prefix reuse is invalid for a bidirectional prefix (a counterexample
exists and the cache never serves one) and valid for a causal prefix."""

from __future__ import annotations

import mlx.core as mx
import pytest
from hypothesis import find, given, note, settings
from hypothesis import strategies as st

from ncm_verify.harness import strategies
from ncm_verify.harness.checks import assert_equal, assert_generations_equal
from ncm_verify.protocol import ncm_api
from ncm_verify.reference.ncm.config import fixture_fields
from ncm_verify.reference.ncm.masks import is_partial_prefix_isolated, make_mask


def head_states(api, model, prefix, k: int) -> list[mx.array]:
    """Every layer's states at the first `k` positions of `prefix` (levels left as placeholders)."""
    filling = [model.config.vocab_size] * sum(model.config.level_sizes)
    tokens = mx.array([list(prefix) + filling], dtype=mx.int32)
    return [state[:, :k] for state in api.layer_states(model, tokens)]


def shared_heads(config):
    """Two prefixes of `config` sharing their first k tokens (1 <= k < P), with k."""
    return st.integers(1, config.prefix_length - 1).flatmap(
        lambda k: st.tuples(
            st.just(k), strategies.prefixes(config), strategies.prefixes(config, config.prefix_length - k)
        )
    )


@pytest.mark.claim("C15")
def test_bidirectional_prefix_states_of_a_shared_head_depend_on_the_rest_and_the_cache_misses(impl):
    api = ncm_api(impl)
    config = api.NCMConfig(**fixture_fields("ncm_tiny"))
    model = api.make_model(config)
    assert not is_partial_prefix_isolated(
        make_mask("ncm", config.prefix_length, config.level_sizes), config.prefix_length
    )

    def heads_differ(example) -> bool:
        k, prefix, tail = example
        other = prefix[:k] + tail
        return any(
            not mx.array_equal(a, b).item()
            for a, b in zip(head_states(api, model, prefix, k), head_states(api, model, other, k))
        )

    k, prefix, tail = find(
        shared_heads(config), heads_differ, settings=settings(max_examples=50, database=None, derandomize=True)
    )
    other = prefix[:k] + tail
    print(f"ncm: prefixes {prefix} and {other} share {k} tokens but not their states")
    cache = api.PrefixCache()
    api.generate_cached(model, mx.array([prefix], dtype=mx.int32), mx.random.key(0), cache)
    served = api.generate_cached(model, mx.array([other], dtype=mx.int32), mx.random.key(0), cache)
    assert_equal(served.cache_hits, 0, label="rows served for a prefix sharing only a head")
    assert_equal(cache.hits, 0, label="cache hits")
    # the output, not only the counter: a cache that serves a head's states unannounced is wrong too
    expected = api.generate_uncached(model, mx.array([other], dtype=mx.int32), mx.random.key(0))
    call = f"generate_cached({other}) after {prefix} was stored"
    assert_generations_equal(served, expected, dtype=mx.float32, label="shared head's request vs uncached", call=call)


@pytest.mark.claim("C15")
@given(data=st.data())
def test_the_cache_misses_every_near_miss_of_a_stored_prefix_and_hits_the_prefix_itself(impl, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, min_prefix_length=2), label="config")
    prefix = data.draw(strategies.prefixes(config), label="prefix")
    extra = data.draw(st.integers(0, config.vocab_size - 1), label="appended_token")
    shift = data.draw(st.integers(1, config.vocab_size - 1), label="token_change")
    model, cache = api.make_model(config), api.PrefixCache()
    call = f"make_model({config}); generate_cached(prefix={prefix}) then keys_for near misses"
    note(call)
    api.generate_cached(model, mx.array([prefix], dtype=mx.int32), mx.random.key(0), cache)
    changed = []
    for position in (0, len(prefix) // 2, len(prefix) - 1):
        edited = list(prefix)
        edited[position] = (edited[position] + shift) % config.vocab_size
        changed.append(edited)
    near_misses = [prefix[:-1], prefix + [extra], *changed]
    for row, key in zip(near_misses, cache.keys_for(model, near_misses)):
        assert cache.lookup(key) is None, f"cache served {row} from the entry of {prefix}\n  call: {call}"
    (other_tenant,) = cache.keys_for(model, [prefix], namespace="another tenant")
    assert cache.lookup(other_tenant) is None, f"cache served {prefix} across namespaces\n  call: {call}"
    assert_equal(cache.hits, 0, label="hits for near misses", call=call)
    assert_equal(cache.misses, 1 + len(near_misses) + 1, label="misses for near misses", call=call)
    served = api.generate_cached(model, mx.array(changed, dtype=mx.int32), mx.random.key(0), cache)
    assert_equal(served.cache_hits, 0, label="rows served for one-token changes", call=call)
    expected = api.generate_uncached(model, mx.array(changed, dtype=mx.int32), mx.random.key(0))
    dtype = getattr(mx, config.dtype)
    assert_generations_equal(served, expected, dtype=dtype, label="one-token changes vs uncached", call=call)
    (exact,) = cache.keys_for(model, [prefix])
    assert cache.lookup(exact) is not None, f"cache missed the stored prefix {prefix}\n  call: {call}"
    assert_equal(cache.hits, 1, label="hits for the exact prefix", call=call)


@pytest.mark.claim("C15")
@given(data=st.data())
def test_causal_prefix_states_of_a_shared_head_do_not_depend_on_the_rest(impl, data):
    api = ncm_api(impl)
    config = data.draw(
        strategies.ncm_configs(api.NCMConfig, masks=("causal",), dtypes=("float32", "float16"), min_prefix_length=2),
        label="config",
    )
    k, prefix, tail = data.draw(shared_heads(config), label="shared_head")
    other = prefix[:k] + tail
    model = api.make_model(config)
    call = f"layer_states(make_model({config}), {prefix} vs {other})[:, :{k}]"
    note(call)
    assert is_partial_prefix_isolated(
        make_mask("causal", config.prefix_length, config.level_sizes), config.prefix_length
    )
    for layer, (a, b) in enumerate(zip(head_states(api, model, prefix, k), head_states(api, model, other, k))):
        assert_equal(a, b, label=f"causal head states at layer {layer}", call=call)
