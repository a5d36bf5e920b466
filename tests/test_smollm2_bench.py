"""The bench's rows on SmolLM2-135M (kernel steps on its shipped rows, prefix caching) and the float32 normalisation
bound those rows showed was missing; nothing here is timed."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.bench import measure as bench
from ncm_verify.bench import prefix_cache
from ncm_verify.bench.ratios import grouped_ratios
from ncm_verify.harness.strategies import SMOLLM2_VOCAB, smollm2_logits
from ncm_verify.protocol import load_implementation
from ncm_verify.reference import speculative
from ncm_verify.reference._kernels import checks
from ncm_verify.tolerances import NORMALISATION, float32_softmax_normalisation, normalisation_for


@pytest.mark.parametrize("case", bench.smollm2_cases((2,), ("quantized", "temperature")), ids=lambda c: c.name)
def test_each_step_on_smollm2_rows_gives_one_outcome_eager_compiled_and_validated(case):
    inputs = bench.make_kernel_inputs(case, seed=4)
    assert inputs["target"].shape == (2, case.drafts + case.spec.bonus_row, SMOLLM2_VOCAB)
    outcomes = {
        name: [np.array(a) for a in step()]
        for name, step in bench.make_ours(load_implementation(), case, inputs).items()
    }
    for name in ("compiled", "validated"):
        for got, want in zip(outcomes[name], outcomes["eager"]):
            np.testing.assert_array_equal(got, want, err_msg=f"{case.name}: {name} differs from eager")


def test_smollm2_drafts_are_drawn_where_the_draft_rows_hold_mass():
    case = bench.BenchCase("chain", SMOLLM2_VOCAB, 4, 8, smollm2="temperature")
    inputs = bench.make_kernel_inputs(case, seed=1)
    drawn = np.take_along_axis(inputs["np_draft"], inputs["np_tokens"][..., None], axis=-1)
    assert (drawn > 0).all(), "a draft token the draft row gives no mass"


@pytest.mark.parametrize(("vocab", "relation"), [(32_000, "quantized"), (SMOLLM2_VOCAB, "shuffled")])
def test_a_smollm2_case_off_its_vocabulary_or_relations_is_refused_by_name(vocab, relation):
    with pytest.raises(ValueError, match="^case: SmolLM2's rows need vocab 49152"):
        bench.make_kernel_inputs(bench.BenchCase("chain", vocab, 4, 1, smollm2=relation))


def test_ratios_on_smollm2_rows_are_grouped_apart_from_the_random_rows():
    def case(name: str, value: float) -> dict:
        return {"case": name, "contenders": {"eager": {"ratios": {"vs numpy": {"value": value, "better": "higher"}}}}}

    measured = {
        "kernels": [
            case(bench.BenchCase("chain", 128_256, 4, 1).name, 2.0),
            case(bench.BenchCase("chain", SMOLLM2_VOCAB, 4, 1, smollm2="quantized").name, 8.0),
        ]
    }
    grouped = grouped_ratios(measured)
    assert grouped[("chain", "eager", "vs numpy")]["value"] == pytest.approx(2.0)
    assert grouped[("chain on SmolLM2", "eager", "vs numpy")]["value"] == pytest.approx(8.0)


@pytest.mark.parametrize(("prefix", "question", "tokens"), [(256, 15, 1), (1024, 16, 8), (1, 1, 1)])
def test_the_prefix_cache_prediction_counts_positions_and_pairs_one_by_one(prefix, question, tokens):
    total = prefix + question + tokens - 1
    positions = range(1, total + 1)  # position i attends to keys 1..i
    uncached = {"positions": len(positions), "pairs": sum(positions)}
    cached = {"positions": total - prefix, "pairs": sum(i for i in positions if i > prefix)}
    predicted = prefix_cache.predicted_speedups(prefix, question, tokens)
    assert predicted == {name: pytest.approx(uncached[name] / cached[name]) for name in uncached}


# --- the float32 normalisation bound ---


def test_the_float32_bound_counts_every_rounding_of_a_softmax_and_of_the_check_s_sum():
    vocab = SMOLLM2_VOCAB
    additions = (vocab - 1) + 2 + 46 + vocab // 512  # the softmax's sum, its division, the check's blocked sum
    unit = additions * 2.0**-24
    assert float32_softmax_normalisation(vocab) == unit / (1 - unit)
    assert normalisation_for("p", mx.float32, 8) == NORMALISATION[mx.float32]  # small rows keep the 1e-4 floor
    assert normalisation_for("p", mx.float16, vocab) == NORMALISATION[mx.float16]  # half rows: their own eps


def test_a_float32_row_of_49152_entries_may_stray_by_its_bound_and_no_further():
    bound = float32_softmax_normalisation(SMOLLM2_VOCAB)
    values = np.zeros((1, 1, SMOLLM2_VOCAB))
    values[0, 0, :2] = 0.5
    values[0, 0, 0] += bound / 2
    checks.check_probabilities("q", mx.array(values, dtype=mx.float32), 3)
    values[0, 0, 0] = 0.5 + 2 * bound
    with pytest.raises(ValueError, match="^q: rows do not sum to 1"):
        checks.check_probabilities("q", mx.array(values, dtype=mx.float32), 3)


def test_verify_chain_accepts_mlx_softmax_of_smollm2_logits_within_the_bound():
    """mx.softmax sums sequentially on the CPU: 2.06e-4 off at T = 1 on these rows, which 1e-4 refused."""
    logits = mx.array(smollm2_logits()["float32"], dtype=mx.float32)
    probs = mx.softmax(logits, axis=-1)
    gap = np.abs(np.array(probs, dtype=np.float64).sum(axis=-1) - 1).max()  # exact: float64 sums of float32 values
    assert gap <= float32_softmax_normalisation(SMOLLM2_VOCAB), f"mx.softmax strays {gap:.3g}, past the worst case"
    target, draft = probs[None, :5], probs[None, 5:9]
    tokens = mx.argmax(draft, axis=-1).astype(mx.int32)
    outcome = speculative.verify_chain(target, draft, tokens, key=mx.random.key(0))
    mx.eval(*outcome)


# --- one function for the rows a loop draws from ---


def test_every_loop_and_drafter_draws_from_the_one_rows_at_temperature():
    from ncm_verify.mlx_lm_real import text_drafters
    from ncm_verify.reference.drafting import base, loop, models, tree_loop

    users = {"loop": loop, "tree_loop": tree_loop, "models": models}
    assert all(module.rows_at_temperature is base.rows_at_temperature for module in users.values())
    assert text_drafters.scaled_softmax is base.rows_at_temperature


def test_rows_at_temperature_scales_as_mlx_lm_s_sampler_and_is_one_hot_at_zero():
    from ncm_verify.reference.drafting.base import rows_at_temperature, softmax_rows

    logits = mx.array([[0.1, 2.3, 2.3, -1.0], [5.0, 4.0, 3.0, 2.0]])
    temperature = 0.7  # 1 / 0.7 rounds, so x * (1 / T) and x / T differ in the last bit for some x
    assert mx.array_equal(rows_at_temperature(logits, temperature), softmax_rows(logits * (1.0 / temperature)))
    assert rows_at_temperature(logits, 0).tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]  # the first maximum


def test_a_tree_on_smollm2_rows_drafts_each_node_s_top_children_and_verifies():
    from ncm_verify.bench.trees import TreeLatencyCase, eagle_tree, tree_inputs

    case = TreeLatencyCase("eagle", eagle_tree(3, 2), SMOLLM2_VOCAB, 2, smollm2="quantized")
    inputs = tree_inputs(case)
    draft, tokens = np.array(inputs["draft"]), np.array(inputs["tokens"])
    for b in range(case.batch):
        for parent in set(case.parents):
            children = [tokens[b, n] for n, p in enumerate(case.parents) if p == parent]
            row = draft[b, parent + 1]
            kth = np.sort(row)[-len(children)]  # ties may pick either id: compare masses, not ids
            assert len(set(children)) == len(children) and row[children].min() >= kth, f"{b}, {parent}: not top ids"
    outcome = load_implementation().verify_tree(
        inputs["target"], inputs["draft"], inputs["tokens"], inputs["parents"], key=mx.random.key(0), mode="top_k"
    )
    assert np.array(outcome.num_accepted).max() <= case.depth
