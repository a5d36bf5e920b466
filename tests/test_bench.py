"""What `make bench` times computes what the properties verified, on small cases; nothing here is timed.

Also the bench's bookkeeping: the comparison against a baseline, and the
report's C9 line.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.bench import measure as bench
from ncm_verify.bench import ratios as bench_ratios
from ncm_verify.oracles import numpy_steps
from ncm_verify.protocol import load_implementation
from ncm_verify.reference import speculative
from ncm_verify.reference._kernels import chain

SMALL = [
    bench.BenchCase("chain", 37, 3, 5),
    bench.BenchCase("chain", 1500, 2, 3, "bfloat16"),
    bench.BenchCase("greedy", 37, 3, 4),
    bench.BenchCase("factorized", 37, 3, 4),
]


def outcome_arrays(outcome) -> list[np.ndarray]:
    return [np.array(part) for part in outcome]


@pytest.mark.parametrize("case", SMALL, ids=lambda case: case.name)
def test_eager_compiled_and_validated_steps_give_the_same_outcome(case):
    impl = load_implementation("ncm_verify.reference")
    inputs = bench.make_kernel_inputs(case, seed=3)
    results = {name: outcome_arrays(step()) for name, step in bench.make_ours(impl, case, inputs).items()}
    for name in ("compiled", "validated"):
        for got, want in zip(results[name], results["eager"]):
            np.testing.assert_array_equal(got, want, err_msg=f"{case.name}: {name} differs from eager")


@pytest.mark.parametrize("case", [c for c in SMALL if c.step == "chain"], ids=lambda case: case.name)
def test_the_numpy_chain_peer_equals_apply_chain_given_the_same_uniforms(case):
    inputs = bench.make_kernel_inputs(case, seed=5)
    num_draft = np.arange(case.batch) % (case.drafts + 1)  # every draft length, 0 included
    uniforms = numpy_steps.numpy_uniforms(np.random.default_rng(2), (case.batch, 2, case.drafts + 1))
    want = speculative.apply_chain(
        mx.array(inputs["np_target"]),
        mx.array(inputs["np_draft"]),
        inputs["tokens"],
        mx.array(num_draft.astype(np.int32)),
        mx.array(uniforms),
    )
    got = numpy_steps.numpy_chain_step(
        inputs["np_target"], inputs["np_draft"], inputs["np_tokens"], num_draft, uniforms
    )
    for part, (g, w) in zip(("tokens", "num_accepted"), zip(got, outcome_arrays(want))):
        np.testing.assert_array_equal(g, w, err_msg=f"{case.name}: NumPy peer's {part} differ from apply_chain")


def test_the_numpy_greedy_and_factorized_peers_equal_the_kernels():
    case = bench.BenchCase("factorized", 37, 3, 6)
    inputs = bench.make_kernel_inputs(case, seed=9)
    target, draft, tokens = inputs["np_target"], inputs["np_draft"], inputs["np_tokens"]
    uniforms = numpy_steps.numpy_uniforms(np.random.default_rng(4), (case.batch, 2, case.drafts))
    want = speculative.apply_factorized(mx.array(target), mx.array(draft), inputs["tokens"], mx.array(uniforms))
    for g, w in zip(numpy_steps.numpy_factorized_step(target, draft, tokens, uniforms), outcome_arrays(want)):
        np.testing.assert_array_equal(g, w, err_msg="NumPy factorised peer differs from apply_factorized")
    greedy_tokens = tokens[:, :-1].copy()  # G = 2 drafts judged against the 3 target rows
    num_draft = np.array([2, 1, 0, 2, 2, 1])
    greedy_tokens[::2, 0] = target[::2, 0].argmax(axis=-1)  # some drafts accepted
    want = speculative.apply_greedy(mx.array(target), mx.array(greedy_tokens), mx.array(num_draft))
    for g, w in zip(numpy_steps.numpy_greedy_step(target, greedy_tokens, num_draft), outcome_arrays(want)):
        np.testing.assert_array_equal(g, w, err_msg="NumPy greedy peer differs from apply_greedy")


def test_the_transformers_peer_accepts_a_certain_draft_and_corrects_an_impossible_one():
    loaded, why = bench.load_transformers_step()
    if loaded is None:
        pytest.skip(why)
    case = bench.BenchCase("chain", 6, 2, 2)
    target = np.zeros((2, 3, 6), np.float32)
    target[:, [0, 1, 2], [1, 4, 5]] = 1.0  # one-hot rows: the target emits 1, 4, 5
    draft = target[:, :2].copy()
    draft[1, 0] = 0.0
    draft[1, 0, 3] = 1.0  # sequence 1 drafts 3 first, where p is 0: rejected, corrected to 1
    tokens = np.array([[1, 4], [3, 4]], np.int32)
    inputs = {"target": mx.array(target), "draft": mx.array(draft), "tokens": mx.array(tokens)}
    outcome = bench.make_transformers_peer(case, inputs, loaded)()
    assert np.array(outcome.tokens).tolist() == [[1, 4, 5], [1, -1, -1]]
    assert np.array(outcome.num_accepted).tolist() == [2, 0]


@pytest.mark.parametrize("vocab", [1, 2, 7, 32, 33, 1025, 5000])
def test_the_two_level_draw_takes_the_first_id_whose_exact_cumulative_weight_reaches_the_threshold(vocab):
    """Dyadic weights summing to exactly 1 make every partial sum exact in float32, in any order,
    so the draw must equal a full count even with thresholds on, just below and just above a boundary."""
    rng = np.random.default_rng(vocab)
    counts = rng.integers(1, 64, size=(4, vocab)) * (rng.random((4, vocab)) < 0.3)
    counts[:, -1] += 2**16 - counts.sum(axis=-1)  # each row's total is exactly 2^16 units
    weights = (counts / 2**16).astype(np.float32)
    cdf = np.cumsum(counts, axis=-1) / 2**16
    picks = rng.integers(0, vocab, size=4)
    uniforms = cdf[np.arange(4), picks] * np.array([1.0, 1 - 2**-20, 1 + 2**-20, 0.5])
    uniforms = np.clip(uniforms, 2**-24, 1 - 2**-24).astype(np.float32)
    expected = (cdf < uniforms[:, None].astype(np.float64)).sum(axis=-1)
    zeros = np.zeros_like(weights)
    for q, what in ((zeros, "residual of q = 0"), (weights, "fallback to p where q = p")):
        got = np.array(speculative.sample_residual(mx.array(weights), mx.array(q), mx.array(uniforms)))
        np.testing.assert_array_equal(got, expected, err_msg=f"V={vocab}: {what}")


def test_a_block_whose_running_sum_ends_below_the_threshold_yields_its_last_positive_weight():
    """Block sums and running sums may round apart; the id drawn must never be a zero weight past the block's mass."""
    weights = mx.array([[0.0, 0.5, 0.0, 0.25, 0.0, 0.0], [0.5, 0.0, 0.25, 0.0, 0.25, 0.0]])
    start, threshold = mx.array([[0.0], [0.0]]), mx.array([[0.8], [0.6]])
    got = np.array(speculative.index_in_block(start, weights, threshold))[:, 0]
    np.testing.assert_array_equal(got, [3, 2], err_msg="blocks ending below (row 0) and reaching (row 1) the threshold")


@pytest.mark.parametrize("masked", [True, False], ids=["masked sum", "minimum and sum"])
def test_both_value_checks_refuse_every_corruption_and_pass_valid_rows(masked):
    """Small inputs take the masked sum and large ones the minimum and sum: each must catch everything."""
    rows = np.array(mx.softmax(mx.random.normal((3, 1000), key=mx.random.key(4)), axis=-1))
    assert speculative.valid_rows("p", mx.array(rows), masked).item(), "valid rows refused"
    for what, value in (("NaN", np.nan), ("+inf", np.inf), ("-inf", -np.inf), ("negative", -1e-3)):
        bad = rows.copy()
        bad[1, 18] += bad[1, 17] - value if np.isfinite(value) else 0.0  # a negative entry in a row summing to 1
        bad[1, 17] = value
        assert not speculative.valid_rows("p", mx.array(bad), masked).item(), f"a row holding {what} passed"
    assert not speculative.valid_rows("p", mx.array(rows * 1.01), masked).item(), "rows summing to 1.01 passed"


def test_a_chain_step_corrected_in_groups_of_sequences_equals_one_corrected_whole(monkeypatch):
    case = bench.BenchCase("chain", 300, 3, 7)
    inputs = bench.make_kernel_inputs(case, seed=6)
    arguments = (inputs["target"], inputs["draft"], inputs["tokens"], mx.array(np.arange(7, dtype=np.int32) % 4))
    uniforms = mx.array(numpy_steps.numpy_uniforms(np.random.default_rng(8), (7, 2, 4)))
    whole = outcome_arrays(speculative.apply_chain(*arguments, uniforms))
    monkeypatch.setattr(chain, "CORRECTION_ENTRIES", 2 * case.vocab)  # groups of 2, 2, 2 and 1
    grouped = outcome_arrays(speculative.apply_chain(*arguments, uniforms))
    for part, g, w in zip(("tokens", "num_accepted"), grouped, whole):
        np.testing.assert_array_equal(g, w, err_msg=f"{part} differ when corrected in groups of 2 sequences")


def test_one_sequence_draws_the_uniforms_of_its_row_in_a_batch():
    """A batch of one skips vmap; its draw must still be the batch's row, or batch invariance breaks."""
    keys = mx.random.split(mx.random.key(11), 6)
    batch = np.array(speculative.make_uniforms(keys, (2, 5)))
    for row in range(6):
        alone = np.array(speculative.make_uniforms(keys[row : row + 1], (2, 5)))
        np.testing.assert_array_equal(alone[0], batch[row], err_msg=f"uniforms of sequence {row} drawn alone")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_blockwise_argmax_equals_mlx_argmax_on_ties_infinities_and_nan(dtype):
    """Unvalidated scores may hold anything: the greedy step's argmax must still be MLX's own."""
    rng = np.random.default_rng(5)
    scores = rng.integers(-2, 3, size=(40, 3, 32 * 9)).astype(np.float32)
    for kind, value in enumerate((-np.inf, np.inf, np.nan)):
        scores[kind::4][rng.random(scores[kind::4].shape) < 0.3] = value
    scores = mx.array(scores).astype(getattr(mx, dtype))
    got, want = np.array(speculative.first_argmax(scores)), np.array(mx.argmax(scores, axis=-1))
    np.testing.assert_array_equal(got, want, err_msg=f"first_argmax vs mx.argmax over 120 {dtype} rows")


def test_validation_still_names_the_first_bad_argument():
    inputs = bench.make_kernel_inputs(bench.BenchCase("chain", 2000, 3, 2))
    target, draft, tokens = inputs["target"], inputs["draft"], inputs["tokens"]
    bad_target = mx.concatenate([target[:, :1] * -1.0, target[:, 1:]], axis=1)
    with pytest.raises(ValueError, match="^target_probs: contains negative"):
        speculative.verify_chain(bad_target, draft[:, :1], tokens, key=mx.random.key(0))
    with pytest.raises(ValueError, match="^draft_tokens: token ids outside"):
        speculative.verify_chain(target, draft, tokens + 5000, key=mx.random.key(0))
    unnormalised = draft * 1.5
    with pytest.raises(ValueError, match="^draft_probs: rows do not sum to 1"):
        speculative.verify_chain(target, unnormalised, tokens, key=mx.random.key(0))


def fake_bench(speedup: float, floor_multiple: float, commit: str = "abc") -> dict:
    ratios = {
        "vs numpy": bench_ratios.ratio(speedup, "higher", ""),
        "x mlx reduction floor": bench_ratios.ratio(floor_multiple, "lower", ""),
    }
    kernel = {
        "case": "chain V=128256 G=4 B=1 float32",
        "step": "chain",
        "vocab": 128_256,
        "drafts": 4,
        "batch": 1,
        "dtype": "float32",
        "contenders": {
            name: {"median_s": 1e-3, "calls": 9, "ratios": ratios, "ratios_of_minima": ratios}
            for name in ("eager", "validated")
        },
    }
    speedups = {
        "vs uncached": bench_ratios.ratio(2.0, "higher", ""),
        "of predicted": bench_ratios.ratio(0.8, "higher", ""),
    }
    warm = {"median_s": 0.1, "calls": 9, "ratios": speedups, "ratios_of_minima": speedups}
    generation = {"case": "generation sudoku B=8", "contenders": {"cached warm": warm}}
    return {
        "schema": bench_ratios.BENCH_SCHEMA,
        "impl": "ncm_verify.reference",
        "commit": commit,
        "datetime": "d",
        "device": "cpu",
        "kernels": [kernel],
        "generation": [generation],
    }


def test_ratios_are_grouped_by_kind_of_case_as_geometric_means():
    first, second = fake_bench(4.0, 2.0), fake_bench(1.0, 2.0)
    second["kernels"][0]["case"] = "chain V=32000 G=4 B=8 float32"
    first["kernels"] += second["kernels"]
    grouped = bench_ratios.grouped_ratios(first)
    assert grouped[("chain", "eager", "vs numpy")]["value"] == pytest.approx(2.0)
    assert grouped[("chain", "eager", "vs numpy")]["cases"] == 2


def test_the_c9_line_shows_ratios_only_for_the_same_implementation_and_commit():
    measured = fake_bench(4.0, 2.0, commit="abc")
    line = bench_ratios.c9_summary(measured, "ncm_verify.reference", "abc")
    assert "B=1 eager: vs numpy 4.00" in line and "80% of predicted" in line and "not asserted" in line
    assert bench_ratios.c9_summary(None, "ncm_verify.reference", "abc") == "no make bench was run for this report"
    other = bench_ratios.c9_summary(measured, "ncm_verify.reference", "def")
    assert "not ncm_verify.reference at def" in other and "4.00" not in other


def test_a_tiny_bench_run_writes_every_ratio_and_renders_its_table():
    cases = [bench.BenchCase("chain", 300, 2, 2), bench.BenchCase("greedy", 300, 2, 2)]
    run = bench.run_bench(
        "ncm_verify.reference", "quick", 2, 0.1, cases=cases, cache_configs={"sudoku": {}}, progress=lambda text: None
    )
    chain = run["kernels"][0]["contenders"]
    assert set(chain["eager"]["ratios"]) >= {"vs numpy", "x numpy copy floor", "x mlx reduction floor"}
    assert "vs eager" in chain["compiled"]["ratios"]
    assert chain["validated"]["ratios"]["x unvalidated"]["value"] > 0, "validation's cost is not beside the step"
    assert {row["kernel"] for row in run["goals"]} == {"chain", "greedy"}, "a measured kernel has no goal beside it"
    assert chain[bench.ROUND_TRIP]["median_s"] > 0, "the run does not say what one MLX call cost"
    warm = run["generation"][0]
    assert warm["loaded_hits"] == warm["batch"], "the persisted cache did not serve every row"
    assert warm["contenders"]["cached warm"]["predicted_speedup"] == pytest.approx(261 / 99)
    table = bench_ratios.format_bench(run)
    assert "chain V=300 G=2 B=2 float32" in table and "generation sudoku B=8" in table


def test_the_report_c9_row_carries_the_bench_line_of_the_same_commit():
    from ncm_verify.report import document
    from ncm_verify.report.ledger import read_ledger

    ledger, _ = read_ledger(None)
    evidence = {
        "properties": [],
        "impl": "ncm_verify.reference",
        "profile": "ci",
        "environment": {"commit": "abc"},
        "policy": {},
        "budget": {},
    }
    rows = {c["id"]: c for c in document.build_report(ledger, evidence, bench=fake_bench(4.0, 2.0))["claims"]}
    assert "B=1 eager: vs numpy 4.00" in rows["C9"]["reason"]
    unmeasured = {c["id"]: c for c in document.build_report(ledger, evidence)["claims"]}
    assert "no make bench was run" in unmeasured["C9"]["reason"]
    assert "not asserted" not in rows["C8"]["reason"]
