"""`assert_*` helpers: each message says what was seen, what was expected, and the call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import note, reject

from ncm_verify.evidence.chi_square import WORST_BINS, worst_bin_parts
from ncm_verify.harness import evidence, stats
from ncm_verify.tolerances import EXACT_IDENTITY, Tolerance, tolerance_for


def as_numpy(array) -> np.ndarray:
    """A float64/int NumPy copy of an MLX or NumPy array (evaluates MLX lazily built arrays)."""
    import mlx.core as mx

    if isinstance(array, mx.array):
        if mx.issubdtype(array.dtype, mx.floating):
            array = array.astype(mx.float32)
        return np.array(array)
    return np.asarray(array)


def assert_equal(actual, expected, *, label: str, call: str = "") -> None:
    """Exact equality of two arrays (tokens, latents, identical-shape states)."""
    actual, expected = as_numpy(actual), as_numpy(expected)
    if actual.shape != expected.shape:
        raise AssertionError(f"{label}: shape {actual.shape}, expected {expected.shape}\n  call: {call}")
    mismatch = np.argwhere(actual != expected)
    evidence.record_difference(label, float(len(mismatch)), 0.0)
    if len(mismatch):
        where = tuple(mismatch[0])
        raise AssertionError(
            f"{label}: {len(mismatch)} of {actual.size} entries differ; first at {where}: "
            f"{actual[where]!r}, expected {expected[where]!r}\n  call: {call}"
        )


def assert_close(actual, expected, *, dtype, label: str, call: str = "", tolerance: Tolerance | None = None) -> None:
    """Agreement within the tolerance table's entry for `dtype`, or a named override `tolerance`."""
    tolerance = tolerance_for(dtype) if tolerance is None else tolerance
    actual, expected = as_numpy(actual).astype(np.float64), as_numpy(expected).astype(np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"{label}: shape {actual.shape}, expected {expected.shape}\n  call: {call}")
    difference = np.abs(actual - expected)
    allowed = tolerance.atol + tolerance.rtol * np.abs(expected)
    worst = float(difference.max(initial=0.0))
    evidence.record_difference(label, worst, tolerance.atol)
    bad = ~(difference <= allowed)
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{label}: {int(bad.sum())} entries beyond atol={tolerance.atol}, rtol={tolerance.rtol} "
            f"for {dtype}; worst |diff| {worst:.3g}; first at {where}: {actual[where]!r}, "
            f"expected {expected[where]!r}\n  call: {call}"
        )


def summarise_result(result) -> str:
    """A short account of what a call returned: fields, shapes and how many entries are NaN."""
    import mlx.core as mx

    fields = result._asdict() if hasattr(result, "_asdict") else {"result": result}
    parts = []
    for field, value in fields.items():
        if isinstance(value, mx.array):
            values = as_numpy(value)
            nan = int(np.isnan(values).sum()) if values.dtype.kind == "f" else 0
            shown = f" with {nan} NaN" if nan else f" {values.ravel()[:6].tolist()}"
            parts.append(f"{field} {tuple(values.shape)}{shown}")
        else:
            parts.append(f"{field} {type(value).__name__}")
    return ", ".join(parts)


def assert_raises_naming(call: Callable, names: list[str], *, description: str) -> None:
    """`call()` raises a ValueError whose message starts with one of `names` and a colon.

    A result (even a NaN one), another exception type or a message naming another
    argument is a failed assertion, not an error: the contract was broken.
    """
    import mlx.core as mx

    expected = " or ".join(f"'{name}:'" for name in names)
    try:
        result = call()
        mx.eval([v for v in (result if isinstance(result, tuple) else (result,)) if isinstance(v, mx.array)])
    except ValueError as error:
        if not any(str(error).startswith(f"{name}:") for name in names):
            raise AssertionError(f"{description}: ValueError {str(error)!r} does not start with {expected}") from None
        return
    except Exception as error:  # noqa: BLE001 - any other exception breaks the contract
        raise AssertionError(
            f"{description}: raised {type(error).__name__}({error}); expected a ValueError starting {expected}"
        ) from None
    raise AssertionError(
        f"{description}: returned a silent answer ({summarise_result(result)}); "
        f"expected a ValueError starting {expected}"
    )


def assert_distributions_equal(
    actual: dict, expected: dict, *, label: str, call: str = "", tolerance: float = EXACT_IDENTITY
) -> None:
    """Two enumerated distributions (outcome -> probability) agree within `tolerance` (`EXACT_IDENTITY`)."""
    outcomes = set(actual) | set(expected)
    worst, where = 0.0, None
    for outcome in outcomes:
        gap = abs(actual.get(outcome, 0.0) - expected.get(outcome, 0.0))
        if gap > worst:
            worst, where = gap, outcome
    evidence.record_difference(label, worst, tolerance)
    if worst > tolerance:
        raise AssertionError(
            f"{label}: outcome {where} has probability {actual.get(where, 0.0)!r}, "
            f"expected {expected.get(where, 0.0)!r} (|diff| {worst:.3g} > {tolerance})\n  call: {call}"
        )


def outcome_labels(shape: tuple[int, ...], *names: str) -> Callable[[int], str]:
    """Label flat outcome indices of `shape`: one name per leading axis, the last name for the rest.

    ``outcome_labels((3, 4, 4), "latent", "tokens")(21)`` is ``"latent 1, tokens (1, 1)"``.
    """

    def label(index: int) -> str:
        ids = [int(i) for i in np.unravel_index(int(index), shape)]
        rest = ids[len(names) - 1 :]
        parts = [f"{name} {i}" for name, i in zip(names[:-1], ids)]
        return ", ".join(parts + [f"{names[-1]} {rest[0] if len(rest) == 1 else tuple(rest)}"])

    return label


def bin_labels(bin_of: np.ndarray, label_outcome: Callable[[int], str]) -> list[str]:
    """A label per chi-square bin: its outcome, or the outcomes pooled into it."""
    labels = []
    for members in (np.flatnonzero(bin_of == b) for b in range(int(bin_of.max(initial=-1)) + 1)):
        if len(members) == 1:
            labels.append(label_outcome(members[0]))
        else:
            labels.append(f"{len(members)} pooled outcomes ({label_outcome(members[0])}, ...)")
    return labels


def worst_bins(result: stats.ChiSquareResult, labels: list[str]) -> list[dict]:
    """The `WORST_BINS` bins contributing most to the statistic, labelled by outcome."""
    expected, observed = result.expected, result.observed
    return [
        {"outcome": labels[b], "expected": float(expected[b]), "observed": float(observed[b]), "contribution": part}
        for b, part in worst_bin_parts(expected, observed)
    ]


def impossible_outcomes(outcomes: np.ndarray, bin_of: np.ndarray, label_outcome: Callable[[int], str]) -> list[dict]:
    """Sampled outcomes of probability 0, most frequent first (a few)."""
    values, counts = np.unique(outcomes[bin_of[outcomes] < 0], return_counts=True)
    order = np.argsort(-counts, kind="stable")[:WORST_BINS]
    return [{"outcome": label_outcome(values[i]), "observed": int(counts[i])} for i in order]


def assert_fits(result: stats.ChiSquareResult, *, call: str = "") -> None:
    """Record a chi-square result and fail, with its worst labelled bins, when it rejects.

    The bins come from ``result.context["worst_bins"]`` (and ``"impossible_outcomes"``) when the caller labelled them.
    """
    stats.record(result)
    if result.passed:
        return
    rows = [
        f"    {row['outcome']:<40} expected {row['expected']:12.1f}  observed {row['observed']:10.0f}  "
        f"(chi-square part {row['contribution']:.1f})"
        for row in result.context.get("worst_bins", [])
    ]
    rows += [
        f"    {row['outcome']:<40} expected {0.0:12.1f}  observed {row['observed']:10.0f}  (impossible)"
        for row in result.context.get("impossible_outcomes", [])
    ]
    rows.append(f"    {'total':<40} expected {sum(result.expected):12.1f}  observed {sum(result.observed):10.0f}")
    raise AssertionError(
        f"{result.name}: chi-square rejects the exact distribution: p = {result.p_value:.3g} < alpha = "
        f"{result.alpha:.3g} (statistic {result.statistic:.2f} on {result.df} df, n = {result.n}, "
        f"{result.impossible_count} samples of impossible outcomes)\n"
        f"  the {len(result.context.get('worst_bins', []))} worst of {len(result.expected)} bins "
        "(outcome: expected vs observed, contribution to the statistic):\n" + "\n".join(rows) + f"\n  call: {call}"
    )


def is_near_tie(margin: float, logits, dtype) -> bool:
    """Whether a Gumbel `margin` lies within twice `dtype`'s tolerance of the largest of `logits`: a draw there
    may flip on a rounding the tolerance allows, so a differing draw is ill-conditioned input, not a failure."""
    tolerance = tolerance_for(dtype)
    scale = max(float(np.abs(as_numpy(x)).max(initial=0.0)) for x in logits)
    return margin <= 2 * (tolerance.atol + tolerance.rtol * scale)


def assert_generations_equal(actual, expected, *, dtype, label: str, call: str = "") -> None:
    """Two NCM generations agree: identical tokens and latents, logits within `dtype`'s tolerance.

    A token mismatch where `expected` had a near-tie (a Gumbel margin within twice the
    tolerance of its largest logit) is ill-conditioned input: the example is rejected.
    """
    from hypothesis import reject

    same_draws = all(
        np.array_equal(as_numpy(a), as_numpy(b))
        for a, b in zip((*actual.tokens, actual.latents), (*expected.tokens, expected.latents))
    )
    if not same_draws and is_near_tie(expected.margin, (*expected.latent_logits, *expected.token_logits), dtype):
        reject()
    for level, (a, b) in enumerate(zip(actual.tokens, expected.tokens)):
        assert_equal(a, b, label=f"{label}: level {level} tokens", call=call)
    assert_equal(actual.latents, expected.latents, label=f"{label}: latents", call=call)
    for level, (a, b) in enumerate(zip(actual.latent_logits, expected.latent_logits)):
        assert_close(a, b, dtype=dtype, label=f"{label}: latent logits", call=f"{call} level {level}")
    for level, (a, b) in enumerate(zip(actual.token_logits, expected.token_logits)):
        assert_close(a, b, dtype=dtype, label=f"{label}: token logits", call=f"{call} level {level}")


def assert_chain_outcome_well_formed(outcome, drafts, num_draft, vocab: int) -> None:
    """Accepted counts within the drafts, accepted drafts kept, one id in [0, V), then -1."""
    tokens = as_numpy(outcome.tokens).astype(np.int64)
    accepted = as_numpy(outcome.num_accepted).astype(np.int64)
    drafts, num_draft = np.asarray(drafts), np.asarray(num_draft)
    batch, width = drafts.shape[0], drafts.shape[1] + 1
    if tokens.shape != (batch, width) or accepted.shape != (batch,):
        raise AssertionError(f"outcome shapes {tokens.shape}, {accepted.shape}; expected {(batch, width)}, {(batch,)}")
    bad = np.flatnonzero((accepted < 0) | (accepted > num_draft))
    if len(bad):
        b = bad[0]
        raise AssertionError(f"row {b}: num_accepted {accepted[b]} outside [0, num_draft={num_draft[b]}]")
    position = np.arange(width)[None]
    padded = np.concatenate([drafts, np.full((batch, 1), -1)], axis=1)
    emitted = np.take_along_axis(tokens, accepted[:, None], axis=1)[:, 0]
    kept = np.where(position < accepted[:, None], tokens == padded, True).all(axis=1)
    tail = np.where(position > accepted[:, None], tokens == -1, True).all(axis=1)
    valid = kept & tail & (emitted >= 0) & (emitted < vocab)
    if not valid.all():
        b = int(np.flatnonzero(~valid)[0])
        raise AssertionError(
            f"row {b}: malformed outcome tokens {tokens[b].tolist()} with num_accepted {accepted[b]}, "
            f"drafts {drafts[b].tolist()}, num_draft {num_draft[b]}, vocabulary {vocab}"
        )


DETERMINISTIC_SAMPLES = 1024
"""Samples drawn when the exact distribution has one possible outcome: any other fails."""


def assert_sampler_matches(
    name: str,
    probs: np.ndarray,
    sample: Callable[[int], np.ndarray],
    *,
    seed: int,
    call: str = "",
    label_outcome: Callable[[int], str] = str,
) -> stats.ChiSquareResult | None:
    """Plan a chi-square test on the exact `probs`, assert its power, then sample and test.

    `sample(n)` returns n outcome indices into `probs`; `label_outcome(index)` names one
    for the failure message and the report. The power check (seeded by the plan)
    comes before any sample is drawn.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if np.count_nonzero(probs) < 2:
        certain = int(np.flatnonzero(probs)[0])
        assert_certain(name, sample(DETERMINISTIC_SAMPLES), certain, call=call, label_outcome=label_outcome)
        return None
    plan = make_powered_plan(name, probs)
    outcomes = np.asarray(sample(plan.n), dtype=np.int64).ravel()
    result = stats.chi_square_test(name, outcomes, plan, seed=seed)
    labels = bin_labels(plan.bin_of, label_outcome)
    # The report labels its frequency figure's bars and lists the worst bins from these.
    result.context.update(bin_labels=labels, worst_bins=worst_bins(result, labels))
    if result.impossible_count:
        result.context["impossible_outcomes"] = impossible_outcomes(outcomes, plan.bin_of, label_outcome)
    assert_fits(result, call=call)
    return result


def make_powered_plan(name: str, probs: np.ndarray, target_tv: float = stats.TARGET_TV) -> stats.Plan:
    """A chi-square plan on `probs` whose power at `target_tv` is asserted; untestable input is rejected."""
    try:
        plan = stats.make_plan(probs, target_tv=target_tv)
    except stats.UntestableDistribution as reason:
        note(f"{name}: {reason}")
        reject()  # excluded from the examples, never counted as passed
    shortfall = stats.power_shortfall(plan, target_tv)
    if shortfall:
        raise AssertionError(f"{name}: {shortfall}")
    return plan


def assert_certain(
    name: str, outcomes, certain: int, *, call: str = "", label_outcome: Callable[[int], str] = str
) -> None:
    """Every sampled outcome is the only possible one."""
    outcomes = np.asarray(outcomes).ravel()
    wrong = outcomes[outcomes != certain]
    if len(wrong):
        raise AssertionError(
            f"{name}: the only possible outcome is {label_outcome(certain)}, but {len(wrong)} of {len(outcomes)} "
            f"samples were others (first {label_outcome(int(wrong[0]))})\n  call: {call}"
        )


def assert_joint_sample_fits(
    laws: dict[str, np.ndarray],
    sample: Callable[[int], dict[str, np.ndarray]],
    *,
    target_tv: float,
    seed: int,
    call: str = "",
) -> None:
    """Several laws of one sampler, each tested on the same draws: plans and power first, then one sample.

    `sample(n)` returns, per name in `laws`, n outcome indices. A law with a
    single possible outcome is checked draw by draw instead.
    """
    laws = {name: np.asarray(probs, dtype=np.float64) for name, probs in laws.items()}
    plans = {
        name: make_powered_plan(name, probs, target_tv) for name, probs in laws.items() if np.count_nonzero(probs) >= 2
    }
    draws = sample(max([plan.n for plan in plans.values()], default=DETERMINISTIC_SAMPLES))
    for name, probs in laws.items():
        if name in plans:
            result = stats.chi_square_test(name, np.asarray(draws[name])[: plans[name].n], plans[name], seed=seed)
            assert_fits(result, call=call)
        else:
            assert_certain(name, draws[name], int(np.flatnonzero(probs)[0]), call=call)


def top_two_gap(logits) -> float:
    """Smallest gap between the best and second-best logit of any row: an argmax flips only past it."""
    values = np.sort(as_numpy(logits).astype(np.float64), axis=-1)
    return float((values[..., -1] - values[..., -2]).min(initial=np.inf)) if values.shape[-1] > 1 else np.inf


def assert_decodings_equal(actual, expected, *, margin: float, scale: float, dtype, label: str, call: str = "") -> None:
    """Two greedy decodings emit identical tokens.

    A mismatch where `expected` had a near-tie (a top-two `margin` within twice
    the tolerance at logit `scale`) is ill-conditioned input: the example is rejected.
    """
    tolerance = tolerance_for(dtype)
    actual, expected = list(actual), list(expected)
    flipped = len(actual) == len(expected) and actual != expected
    if flipped and margin <= 2 * (tolerance.atol + tolerance.rtol * scale):
        reject()
    assert_equal(np.asarray(actual), np.asarray(expected), label=label, call=call)


def assert_trimmed_window_attends_to_kept_entries(cache, sizes: list[int], trim: int, *, call: str = "") -> int | None:
    """A sliding-window cache (``keep=0``) filled by updates of `sizes` positions, then ``trim(trim)``:
    the next one-position update returns the newest ``max_size - 1`` positions kept, and the new one.

    A key's only feature is its position, so what a fetch returns names the positions
    attended to. A refusal (a ValueError naming ``n``) keeps every position. Returns the
    count trimmed, None when refused.
    """
    import mlx.core as mx

    total = sum(sizes)
    positions = mx.arange(total + 1, dtype=mx.float32).reshape(1, 1, -1, 1)
    begin = 0
    for size in sizes:
        cache.update_and_fetch(positions[:, :, begin : begin + size], positions[:, :, begin : begin + size])
        begin += size
    try:
        trimmed = cache.trim(trim)
    except ValueError as error:
        if not str(error).startswith("n:"):
            raise AssertionError(f"a refused trim should name n: {error}\n  call: {call}") from error
        trimmed = None
    kept = total - (trimmed or 0)
    keys, _ = cache.update_and_fetch(positions[:, :, total:], positions[:, :, total:])
    attended = sorted(int(x) for x in np.array(keys).ravel())
    expected = sorted([*range(max(kept + 1 - cache.max_size, 0), kept), total])
    if attended != expected:
        raise AssertionError(
            f"after trim({trim}) {'refused' if trimmed is None else f'reported {trimmed} trimmed'}, the next "
            f"update attends to positions {attended}; the kept positions' window is {expected}\n  call: {call}"
        )
    return trimmed


STEP_MISMATCH_LINES = 5
"""Mismatched decisions a failure message lists (the count says how many more)."""


def assert_step_matches(comparison, *, label: str, call: str = "") -> None:
    """A kernel step agrees with its float64 oracle (`exact.StepComparison`), near-boundary decisions excused.

    Excused decisions are counted as evidence (excused vs decisions compared) and noted.
    """
    from hypothesis import event

    evidence.record_difference(f"{label}: mismatched decisions", float(len(comparison.mismatches)), 0.0)
    evidence.record_difference(
        f"{label}: excused near-boundary decisions vs decisions compared",
        float(len(comparison.excused)),
        float(comparison.decisions),
    )
    event(f"{label}: excused near-boundary decisions", len(comparison.excused))
    for line in comparison.excused[:STEP_MISMATCH_LINES]:
        note(f"excused (within float32 rounding of its boundary): {line}")
    if comparison.mismatches:
        shown = "\n    ".join(comparison.mismatches[:STEP_MISMATCH_LINES])
        raise AssertionError(
            f"{label}: {len(comparison.mismatches)} of {comparison.decisions} decisions differ from the float64 "
            f"step beyond float32 rounding ({len(comparison.excused)} excused near a boundary):\n    {shown}\n"
            f"  call: {call}"
        )


def assert_kernels_agree(
    outcomes: dict,
    compare_row: Callable[[dict, int], Any],
    *,
    fields: tuple[str, ...],
    provenance: dict[str, str],
    label: str,
    call: str = "",
) -> None:
    """Two kernels' outcomes on one input and one set of uniforms are equal, row by row, up to rounding.

    A row where they differ stands only if each kernel's row agrees with the float64 step under the one
    boundary rule (`tolerances.py`, as `assert_step_matches` applies it) and one of them took an excused
    decision: two correct float32 kernels may round a near-boundary draw apart, nothing else. `outcomes`
    maps each kernel's name to its outcome; ``compare_row(fields, b)`` gives the `exact.StepComparison` of
    one kernel's row b (its `fields` as NumPy arrays); `provenance` says, per kernel, whose code it is.
    """
    (first, a), (second, b) = ((name, {f: as_numpy(getattr(o, f)) for f in fields}) for name, o in outcomes.items())
    for field in fields:
        if a[field].shape != b[field].shape:
            raise AssertionError(
                f"{label}: {field} of shape {a[field].shape} from {first}, {b[field].shape} from {second}\n"
                f"  call: {call}"
            )
    differing = sorted({int(row) for field in fields for row in np.argwhere(a[field] != b[field])[:, 0]})
    failures, excused = [], 0
    for row in differing:
        comparisons = {first: compare_row(a, row), second: compare_row(b, row)}
        beyond = {name: c.mismatches for name, c in comparisons.items() if c.mismatches}
        if not beyond and any(c.excused for c in comparisons.values()):
            excused += 1
            lines = [line for c in comparisons.values() for line in c.excused[:2]]
            note(f"{label}: row {row} differs within float32 rounding: {lines}")
            continue
        shown = "; ".join(f"{first} {a[f][row].tolist()} vs {second} {b[f][row].tolist()} ({f})" for f in fields)
        verdicts = (
            "; ".join(f"{name} against float64: {lines[0]}" for name, lines in beyond.items())
            or "neither takes a near-boundary decision, yet they differ"
        )
        failures.append(f"row {row}: {shown}\n      {verdicts}")
    evidence.record_difference(f"{label}: rows differing beyond float32 rounding", float(len(failures)), 0.0)
    evidence.record_difference(
        f"{label}: rows differing within float32 rounding vs rows", float(excused), float(len(a[fields[0]]))
    )
    if failures:
        shown = "\n    ".join(failures[:STEP_MISMATCH_LINES])
        whose = "; ".join(provenance[name] for name in outcomes)
        raise AssertionError(
            f"{label}: {len(failures)} of {len(a[fields[0]])} rows differ beyond float32 rounding of a boundary "
            f"({excused} excused):\n    {shown}\n  kernels: {whose}\n  call: {call}"
        )
