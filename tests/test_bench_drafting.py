"""The drafting bench's arithmetic (C12): what `make bench` prints for the trained drafters rests on these.
Nothing here times anything or asserts a speed."""

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

from ncm_verify.bench import drafting
from ncm_verify.bench.drafting import (
    crossing_rows,
    exact_tokens_per_pass,
    iid_acceptance,
    leviathan_speedup,
    linear_cost,
    mean_and_error,
    trained_row,
)
from ncm_verify.oracles.exact_acceptance import Component, expected_accepted_length


@pytest.mark.parametrize("k", [1, 3, 8])
def test_leviathan_speedup_is_the_tokens_per_pass_over_the_round_s_cost(k):
    for a in (0.0, 0.3, 0.9):
        tokens = sum(a**i for i in range(k + 1))
        assert leviathan_speedup(a, k, 0.0) == pytest.approx(tokens)
        assert leviathan_speedup(a, k, 0.5) == pytest.approx(tokens / (0.5 * k + 1))
    assert leviathan_speedup(1.0, k, 0.25) == pytest.approx((k + 1) / (0.25 * k + 1))


@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_iid_acceptance_inverts_leviathan_s_tokens_per_pass(k):
    for a in (0.05, 0.4, 0.8, 0.97):
        assert iid_acceptance(leviathan_speedup(a, k, 0.0), k) == pytest.approx(a, abs=1e-9)
    assert iid_acceptance(1.0, k) == pytest.approx(0.0, abs=1e-12)
    assert iid_acceptance(k + 1.0, k) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="tokens_per_pass"):
        iid_acceptance(k + 1.5, k)


def _rows(rng, n, v):
    rows = rng.random((n, v)) ** 3
    return rows / rows.sum(axis=1, keepdims=True)


def test_a_long_block_s_acceptance_cut_to_k_tokens_equals_the_oracle_run_at_k():
    # Two contexts, V = 4, an AR-style drafter whose rows depend on the prefix: the k = 4 result cut to k = 2
    # must be the k = 2 result itself, bounds included, at a floor that leaves prefixes unexpanded.
    rng = np.random.default_rng(0)
    target, draft = {}, {}

    def table(store):
        def rows(keys):
            for key in keys:
                store.setdefault(key, _rows(rng, 1, 4)[0])
            return np.stack([store[key] for key in keys])

        return rows

    components = [Component(0, 1.0), Component(1, 1.0)]
    long = expected_accepted_length(components, 2, 4, table(target), table(draft), floor=0.05)
    assert long.bound.max() > 0, "the floor must leave something unexpanded, or the bound goes untested"
    for k in (1, 2, 3, 4):
        short = expected_accepted_length(components, 2, k, table(target), table(draft), floor=0.05)
        cut = long.first(k)
        np.testing.assert_allclose(cut.accepted_prefix, short.accepted_prefix, rtol=0, atol=1e-15)
        np.testing.assert_allclose(cut.bound, short.bound, rtol=0, atol=1e-15)
        lower, upper = exact_tokens_per_pass(long, k)
        assert lower == pytest.approx(1 + short.lower.mean()) and upper == pytest.approx(1 + short.upper.mean())
    with pytest.raises(ValueError, match="k"):
        long.first(5)


def test_exact_tokens_per_pass_of_a_factorised_drafter_is_the_enumerated_sum():
    # One context, two codes of weights 0.3/0.7, k = 2, V = 3, floor 0: every block enumerated by hand.
    rng = np.random.default_rng(1)
    p0, p1 = _rows(rng, 1, 3)[0], _rows(rng, 3, 3)
    q = [_rows(rng, 2, 3), _rows(rng, 2, 3)]
    weights = (0.3, 0.7)

    def target(keys):
        return np.stack([p0 if not prefix else p1[prefix[0]] for _, prefix in keys])

    components = [Component(0, w, rows) for w, rows in zip(weights, q)]
    result = expected_accepted_length(components, 1, 2, target, floor=0.0)
    want = 1.0
    for w, rows in zip(weights, q):
        for x1, x2 in itertools.product(range(3), repeat=2):
            first = min(p0[x1], rows[0, x1])
            want += w * (first * (x2 == 0) + first * min(p1[x1][x2], rows[1, x2]))
    assert exact_tokens_per_pass(result, 2) == pytest.approx((want, want), abs=1e-12)


def test_mean_and_error_is_the_sample_mean_and_its_standard_error():
    mean, error = mean_and_error([1.0, 2.0, 3.0, 6.0])
    assert mean == 3.0 and error == pytest.approx(np.std([1, 2, 3, 6], ddof=1) / 2)
    assert np.isnan(mean_and_error([2.0])[1])


def test_linear_cost_splits_a_call_into_its_fixed_cost_and_its_cost_per_token():
    fit = linear_cost([1, 2, 3, 5, 9], [0.002 + 0.0005 * n for n in (1, 2, 3, 5, 9)])
    assert fit["per_call_s"] == pytest.approx(0.002) and fit["per_token_s"] == pytest.approx(0.0005)
    with pytest.raises(ValueError, match="lengths"):
        linear_cost([2, 2], [1.0, 1.0])


def test_cycling_hands_each_contender_the_prompts_round_robin():
    seen = []
    call = drafting.cycling([[1], [2], [3]], seen.append)
    for _ in range(7):
        call()
    assert seen == [[1], [2], [3], [1], [2], [3], [1]]


@dataclass
class _Generation:
    tokens: list
    accepted: list
    drafted: list

    @property
    def target_passes(self):
        return len(self.accepted)


def test_a_trained_row_s_figures_follow_from_its_generations_times_and_call_costs():
    k, tokens = 2, 6
    # 6 tokens in 3 passes each; the second's last round drafted 1 of k and is left out of the full rounds
    generations = [_Generation([0] * 6, [2, 0, 1], [2, 2, 2]), _Generation([0] * 6, [1, 2, 0], [2, 2, 1])]
    times = {"target alone": [0.060, 0.066, 0.062], "d": [0.040, 0.030, 0.036]}
    parts = {
        "target step (1 token)": 0.010,
        "target pass (3 tokens)": 0.012,
        "verify_chain": 0.001,
        "proposal (2 tokens): d": 0.004,
    }
    row = trained_row("d", k, tokens, (1.5, 1.7), generations, times, parts)
    assert row["generations"] == 2
    assert row["tokens_per_pass_first_round"]["mean"] == pytest.approx(2.5)
    assert row["tokens_per_pass_measured"]["mean"] == pytest.approx((2.0 + 2.5) / 2)
    assert row["tokens_per_pass_measured"]["standard_error"] == pytest.approx(0.25)
    a = row["alpha"]
    assert 1 + a + a**2 == pytest.approx(2.25)
    assert row["c"] == pytest.approx(0.004 / (2 * 0.010))
    assert row["speedup_predicted"] == pytest.approx(2.25 / (2 * row["c"] + 1))
    assert row["speedup_measured"] == pytest.approx(0.062 / 0.036)
    assert row["ms_per_token"] == pytest.approx({"drafted": 6.0, "target alone": 0.062 / 6 * 1e3})
    spent = row["round_ms"]
    assert spent["round"] == pytest.approx(12.0)  # 36 ms over 3 passes
    assert spent["proposal"] + spent["target pass"] + spent["verify_chain"] + spent["rest of the loop"] == (
        pytest.approx(spent["round"])
    )
    assert row["speedup_predicted_from_parts"] == pytest.approx(2.25 * (0.062 / 6) / 0.017)


def test_crossing_rows_price_a_trained_row_at_each_swept_target_size():
    row = {
        "drafter": "d",
        "k": 2,
        "alpha": 0.5,
        "tokens_per_pass_measured": {"mean": 1.75, "standard_error": 0.1},
        "per_call_s": {"proposal (2 tokens)": 0.004, "verify_chain": 0.001, "target step (1 token)": 0.002},
    }
    sweep = [
        {"hidden_size": 64, "target_step_s": 0.002, "target_pass_s": {"1": 0.002, "3": 0.003}},
        {"hidden_size": 512, "target_step_s": 0.02, "target_pass_s": {"1": 0.02, "3": 0.025}},
    ]
    (out,) = crossing_rows({"rows": [row], "size_sweep": sweep})
    assert out["speedup_predicted_by_target_hidden_size"] == pytest.approx(
        {64: leviathan_speedup(0.5, 2, 0.004 / 0.004), 512: leviathan_speedup(0.5, 2, 0.004 / 0.04)}
    )
    assert out["speedup_from_parts_by_target_hidden_size"] == pytest.approx(
        {64: 1.75 * 0.002 / 0.008, 512: 1.75 * 0.02 / 0.030}
    )
    # measured beside a step of 4 ms, the sweep's ratios carry over, scaled by 4 / 2 (the sweep's at hidden 64)
    row["per_call_s"]["target step (1 token)"] = 0.004
    (scaled,) = crossing_rows({"rows": [row], "size_sweep": sweep}, reference_hidden=64)
    assert scaled["speedup_predicted_by_target_hidden_size"] == pytest.approx(
        {64: leviathan_speedup(0.5, 2, 0.004 / 0.008), 512: leviathan_speedup(0.5, 2, 0.004 / 0.08)}
    )
    assert scaled["speedup_from_parts_by_target_hidden_size"] == pytest.approx(
        {64: 1.75 * 0.004 / (0.004 + 0.006 + 0.001), 512: 1.75 * 0.04 / (0.004 + 0.05 + 0.001)}
    )


def test_the_trained_bench_runs_every_prompt_its_repeats_and_brackets_its_exact_figures():
    # Two held-out prompts, k = 1 and 2, 4 tokens: the shipped models, a few seconds; structure only.
    from ncm_verify import reference
    from ncm_verify.harness import drafting_acceptance
    from ncm_verify.reference.drafting.trained import load_trained

    contexts = drafting_acceptance.held_out_contexts(2, 8, 0)
    drafters = drafting.trained_drafters(("ncm_features", "ar_draft"))
    result = drafting.measure_trained(
        reference, load_trained("target"), drafters, contexts, tokens=4, repeats=2, ks=(1, 2)
    )
    assert [(row["drafter"], row["k"]) for row in result["rows"]] == [
        ("ncm_features", 1),
        ("ar_draft", 1),
        ("ncm_features", 2),
        ("ar_draft", 2),
    ]
    for row in result["rows"]:
        assert row["generations"] == 4, "each prompt twice, the warm-up call dropped"
        exact = row["tokens_per_pass_exact"]
        assert 1 <= exact["lower"] <= exact["upper"] <= row["k"] + 1
        assert 1 <= row["tokens_per_pass_measured"]["mean"] <= row["k"] + 1
    with pytest.raises(ValueError, match="tokens"):
        drafting.measure_trained(reference, load_trained("target"), drafters, contexts, tokens=1, ks=(2,))
