"""Snapshot, restore and replay: the reference's rollback (`ncm_verify.reference.drafting.rollback`), named
where the mlx-lm properties and the bench read it."""

from __future__ import annotations

from ncm_verify.reference.drafting.rollback import (
    TRIM_EXACT,
    replay,
    restore_caches,
    rewinds_by_trim,
    roll_back,
    snapshot_caches,
)

__all__ = ["TRIM_EXACT", "replay", "restore_caches", "rewinds_by_trim", "roll_back", "snapshot_caches"]
