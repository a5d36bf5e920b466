"""C10 on SmolLM2-135M (issue 42): the drafters `make train` ships for it, compared by exact expected accepted length.

The target's rows at 128 held-out contexts (and after each context's 16 likeliest first tokens) are shipped sparse
(`c10_target_rows.npz`, made by `make train ONLY=smollm2_c10_rows`), so no SmolLM2 pass runs here; the drafters'
rows are computed from their shipped weights. `oracles.sparse_acceptance` bounds each drafter's E[accepted] of a
2-token block per context. Each direction is a one-sided paired t-test over the contexts of (the challenger's lower
bound - the baseline's upper bound), at `stats.SMOLLM2_DIRECTION_ALPHA`; its power is stated as the smallest mean
difference the test detects at that alpha with power `stats.POWER`, given its sample size and the observed spread:
    d = (t_{1 - alpha, n - 1} + t_{POWER, n - 1}) * sd / sqrt(n).
The tested difference understates the true one by at most both drafters' bound widths (mean over contexts: the
slack), so the test detects a true difference of d + slack. The verdict (the issue's rule): "shown" where p <= alpha;
"refuted" where not shown and d + slack is below the literature's effect (the test would have seen it); otherwise
"inconclusive at this scale".

Literature effects, converted to tokens per 2-token block at the baseline's own per-position acceptance:
- DistillSpec (Zhou et al., arXiv 2310.08461, abstract): distillation gives 10-45 % speedups over standard
  speculative decoding. At equal drafter cost a speedup is a gain in tokens per target pass (1 + E[accepted]):
  we take the low end, 10 %, as the effect: 0.10 x (1 + E_baseline).
- EAGLE (Li et al., arXiv 2401.15077): drafting from the target's features reaches ~0.8 acceptance per token where
  token-level drafters (Medusa, Lookahead) reach ~0.6: a 4/3 ratio per position, applied to the baseline's a_1, a_2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from ncm_verify.evidence import INCONCLUSIVE
from ncm_verify.harness.stats import SMOLLM2_DIRECTION_ALPHA, paired_detectable_difference, paired_improvement_p_value
from ncm_verify.oracles.sparse_acceptance import SparseTargetRows, two_token_acceptance
from ncm_verify.reference.drafting.subvocab import SubVocabConceptDrafter, SubVocabLlama
from ncm_verify.reference.drafting.trained import SMOLLM2_DRAFTING, file_sha256, load_record, load_trained

C10_ROWS = "c10_target_rows.npz"
DRAFTERS = (
    "smollm2_ar_data",
    "smollm2_ar_distilled",
    "smollm2_ncm_data",
    "smollm2_ncm_distilled",
    "smollm2_ncm_features",
)
DIRECTIONS = (
    ("smollm2_ar_distilled", "smollm2_ar_data", "distillspec"),  # the positive control
    ("smollm2_ncm_distilled", "smollm2_ncm_data", "distillspec"),
    ("smollm2_ncm_features", "smollm2_ncm_data", "eagle"),
)
DISTILLSPEC_SPEEDUP = 0.10
"""The low end of DistillSpec's 10-45 % speedups over standard speculative decoding (arXiv 2310.08461)."""
EAGLE_RATIO = 0.8 / 0.6
"""EAGLE's per-token acceptance (~0.8) over token-level drafters' (~0.6) (arXiv 2401.15077)."""


def load_target_rows(directory=SMOLLM2_DRAFTING) -> tuple[SparseTargetRows, dict[str, np.ndarray]]:
    """The shipped sparse target rows, the file checked against the record's sha256."""
    entry = load_record(directory / "record.json").get("c10_rows")
    if entry is None:
        raise ValueError(f"record: {directory} has no c10_rows entry; `make train ONLY=smollm2_c10_rows` writes it")
    path = directory / entry["file"]
    digest = file_sha256(path)
    if digest != entry["sha256"]:
        raise ValueError(f"c10_rows: {path} has sha256 {digest}, the record says {entry['sha256']}")
    with np.load(path) as stored:
        data = {k: stored[k] for k in stored.files}
    rows = SparseTargetRows(
        data["first_ids"].astype(np.int64),
        data["first_probs"].astype(np.float64),
        data["first_rest"],
        data["second_ids"].astype(np.int64),
        data["second_probs"].astype(np.float64),
        data["second_rest"],
    )
    if not np.array_equal(data["expanded"], data["first_ids"][:, : rows.expanded]):
        raise ValueError("c10_rows: the expanded first tokens are not the first row's likeliest kept entries")
    return rows, data


def ar_values(model: SubVocabLlama, rows: SparseTargetRows, contexts: np.ndarray) -> tuple[np.ndarray, ...]:
    """An AR drafter's weights (C, 1), first rows at the kept ids (C, 1, K), second rows (C, 1, J, K): the contexts
    read once into mlx-lm's cache, which each context's J expanded first tokens then continue."""
    c, j = contexts.shape[0], rows.expanded
    to_sub = np.array(model.sub(mx.arange(model.args.vocab_size)))
    cache = make_prompt_cache(model.inner)
    first = _sub_softmax(model.sub_logits(model.sub(mx.array(contexts)), cache)[:, -1])
    for entry in cache:  # each context's K/V, once per expanded first token
        entry.keys, entry.values = mx.repeat(entry.keys, j, axis=0), mx.repeat(entry.values, j, axis=0)
    following = model.sub(mx.array(rows.first_ids[:, :j].reshape(-1, 1)))
    second = _sub_softmax(model.sub_logits(following, cache)[:, -1])
    q_first = np.take_along_axis(first, to_sub[rows.first_ids], axis=1)
    q_second = np.take_along_axis(second, to_sub[rows.second_ids.reshape(c * j, -1)], axis=1)
    return np.ones((c, 1)), q_first[:, None], q_second.reshape(c, 1, j, -1)


def _sub_softmax(logits: mx.array) -> np.ndarray:
    """float64 rows over sub-vocabulary entries, entry 0 (never proposed) at probability 0, normalised in float64:
    the drafter's full-V row restricted to its support."""
    x = np.array(logits.astype(mx.float32), dtype=np.float64)
    x[:, 0] = -np.inf
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    return x / x.sum(axis=-1, keepdims=True)


def ncm_values(
    model: SubVocabConceptDrafter, rows: SparseTargetRows, contexts: np.ndarray, features: np.ndarray | None
) -> tuple[np.ndarray, ...]:
    """An NCM drafter's code weights q(z | c) (C, Z) and its rows q(x_i | z) at the kept ids."""
    feats = mx.array(features.astype(np.float32)) if model.reads_features and features is not None else None
    log_prior, log_rows = model.sub_law(mx.array(contexts), 2, features=feats)
    prior = np.exp(np.array(log_prior, dtype=np.float64))
    prior /= prior.sum(axis=1, keepdims=True)
    sub_rows = np.exp(np.array(log_rows[0], dtype=np.float64))  # (Z, 2, M): the same for every context
    sub_rows /= sub_rows.sum(axis=-1, keepdims=True)
    to_sub = np.array(
        model.sub(mx.arange(model.vocab_size))
    )  # 0 (never proposed: probability 0) outside the sub-vocabulary
    q_first = sub_rows[:, 0][:, to_sub[rows.first_ids]].transpose(1, 0, 2)  # (C, Z, K)
    q_second = sub_rows[:, 1][:, to_sub[rows.second_ids]].transpose(1, 0, 2, 3)  # (C, Z, J, K)
    return prior, q_first, q_second


@dataclass(frozen=True)
class Row:
    name: str
    parameters: int
    held_out_loss: float
    lower: np.ndarray
    upper: np.ndarray


def drafter_table(names: Sequence[str] = DRAFTERS) -> list[Row]:
    rows, data = load_target_rows()
    record = load_record(SMOLLM2_DRAFTING / "record.json")["models"]
    table = []
    for name in names:
        model = load_trained(name, SMOLLM2_DRAFTING)
        if isinstance(model, SubVocabLlama):
            values = ar_values(model, rows, data["contexts"])
        else:
            assert isinstance(model, SubVocabConceptDrafter)
            values = ncm_values(model, rows, data["contexts"], data["features"])
        lower, upper = two_token_acceptance(rows, *values)
        table.append(Row(name, record[name]["parameters"], record[name]["held_out_loss"], lower, upper))
    return table


@dataclass(frozen=True)
class Direction:
    challenger: str
    baseline: str
    mean_difference: float
    """mean over contexts of (challenger's lower bound - baseline's upper bound)."""
    sd: float
    n: int
    p_value: float
    alpha: float
    detectable: float
    """The smallest mean of the tested (conservative) differences detected at `alpha` with power `stats.POWER`."""
    slack: float
    """Mean over contexts of both drafters' bound widths: the most the conservative difference understates the true
    one, so a true difference of `detectable + slack` is detected with at least that power."""
    literature: float
    source: str

    @property
    def detectable_true(self) -> float:
        return self.detectable + self.slack

    @property
    def verdict(self) -> str:
        if self.p_value <= self.alpha:
            return "shown"
        if self.detectable_true < self.literature:
            return "refuted"
        return INCONCLUSIVE


def literature_effect(source: str, baseline: Row) -> float:
    """The literature's effect in tokens per 2-token block, at the baseline's mean acceptance (see the module)."""
    e = float(((baseline.lower + baseline.upper) / 2).mean())
    if source == "distillspec":
        return DISTILLSPEC_SPEEDUP * (1.0 + e)
    # E = a1 + a1 a2 with a1 = a2 = a: a from E, then each position's acceptance scaled by EAGLE's ratio
    a = (-1 + math.sqrt(1 + 4 * e)) / 2
    scaled = min(1.0, a * EAGLE_RATIO)
    return scaled + scaled**2 - e


def directions(table: Sequence[Row]) -> list[Direction]:
    by_name = {row.name: row for row in table}
    out = []
    for challenger, baseline, source in DIRECTIONS:
        better, base = by_name[challenger].lower, by_name[baseline].upper
        diff = better - base
        n, sd = len(diff), float(diff.std(ddof=1))
        detectable = paired_detectable_difference(diff, SMOLLM2_DIRECTION_ALPHA)
        out.append(
            Direction(
                challenger,
                baseline,
                float(diff.mean()),
                sd,
                n,
                paired_improvement_p_value(better, base),
                SMOLLM2_DIRECTION_ALPHA,
                detectable,
                float((by_name[challenger].upper - better + base - by_name[baseline].lower).mean()),
                literature_effect(source, by_name[baseline]),
                source,
            )
        )
    return out


def describe(table: Sequence[Row], results: Sequence[Direction]) -> str:
    n = len(table[0].lower)
    lines = [
        f"SmolLM2-135M (float32 form) target; exact E[accepted] of a 2-token block on {n} held-out contexts, bracketed"
        " by the sparse target rows (lower..upper)",
        f"{'drafter':<22} {'params':>8}  {'E[accepted] lower..upper':<24} {'held-out loss':>13}",
    ]
    for row in table:
        lines.append(
            f"{row.name:<22} {row.parameters:>8}  {row.lower.mean():.4f}..{row.upper.mean():.4f}{'':>10}"
            f" {row.held_out_loss:>13.4f}"
        )
    lines.append(
        f"{'direction':<46} {'mean diff':>9} {'sd':>6} {'n':>4} {'p':>9} {'alpha':>8} {'detectable':>10}"
        f" {'+slack':>7} {'literature':>10}  verdict"
    )
    for r in results:
        lines.append(
            f"{r.challenger + ' > ' + r.baseline:<46} {r.mean_difference:+9.4f} {r.sd:6.3f} {r.n:>4} {r.p_value:9.3g}"
            f" {r.alpha:8.2g} {r.detectable:10.4f} {r.detectable_true:7.4f} {r.literature:10.4f}"
            f"  {r.verdict} ({r.source})"
        )
    return "\n".join(lines)


def c10() -> tuple[list[Row], list[Direction]]:
    table = drafter_table()
    return table, directions(table)


def as_dict(results: Sequence[Direction]) -> list[dict[str, Any]]:
    return [{**r.__dict__, "detectable_true": r.detectable_true, "verdict": r.verdict} for r in results]


if __name__ == "__main__":
    print(describe(*c10()))
