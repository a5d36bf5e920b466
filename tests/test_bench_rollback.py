"""The rollback bench measures every contender on a model and relates each to the verify pass."""

from __future__ import annotations

from ncm_verify.bench.rollback import format_rows, rollback_row
from ncm_verify.mlx_lm_real.hybrid_models import HybridSpec


def test_a_rollback_row_times_every_contender_and_divides_by_the_verify_pass():
    row = rollback_row(HybridSpec("lfm2", "RA"), prompt=8, drafts=3, accepted=1, rounds=3, budget_s=0.1)
    names = {"verify pass", "snapshot", "restore + replay", "re-forward", "restore"}
    assert set(row["contenders"]) == names
    assert all(figures["median_s"] > 0 and figures["calls"] >= 3 for figures in row["contenders"].values())
    assert row["contenders"]["verify pass"]["x verify pass"] == 1.0
    assert "lfm2 RA" in format_rows([row])
