"""Each MLX peer's speculative code (`Scope`s) and why what the properties leave unreached stays so (`Reason`s).

Paths are relative to the peer environment's site-packages, pinned to the version `run_mlx_peers.MLX_PEERS` installs:
a new version moves lines, and a reason whose lines moved shows as a branch with no reason or as a
``ran_though_not_runnable`` entry in the report.
"""

from __future__ import annotations

from ncm_verify.peers.reach import Reason, Scope

MLX_VLM_DRAFTERS = ("qwen3_5_mtp", "qwen3_dflash", "gemma4_assistant", "gemma4_dflash", "eagle3")
"""The drafters the properties build (`peers.mlx_vlm_spec.make_drafter`); the other model families' are not judged."""

MLX_VLM = (
    Scope("mlx_vlm/speculative/*.py"),
    *(Scope(f"mlx_vlm/speculative/drafters/{name}/*.py") for name in MLX_VLM_DRAFTERS),
    Scope(
        "mlx_vlm/generate/ar.py",
        (
            "_position_seed",
            "_position_keys",
            "_PositionedTargetSampler",
            "generate_step",
            "_sample_with_positions",
            "SpeculativeGenerationBatch",
        ),
    ),
    Scope("mlx_vlm/sample_utils.py"),
)
MLX_VLM_REASONS: tuple[Reason, ...] = ()

DFLASH_MLX = (
    Scope("dflash_mlx/engine/spec_epoch.py"),
    Scope("dflash_mlx/engine/ddtree.py"),
    Scope("dflash_mlx/engine/copyspec.py"),
    Scope("dflash_mlx/engine/acceptance.py"),
    Scope("dflash_mlx/recurrent_rollback_cache.py"),
    Scope("dflash_mlx/model.py"),
)
DFLASH_MLX_REASONS: tuple[Reason, ...] = ()

MTPLX = (
    Scope("mtplx/sampling.py"),
    Scope("mtplx/qwen4_block_verify.py"),
    Scope(
        "mtplx/cache_state.py",
        (
            "snapshot_cache",
            "snapshot_untrimmable_cache",
            "restore_cache",
            "_restore_state_preserving_container",
            "rollback_after_verify",
            "trim_verified_window_to_prefix",
            "trim_verified_window_without_snapshot",
            "_is_trimmable",
        ),
    ),
    Scope("mtplx/generation.py", ("_point_mass_block_accept", "_sample_draft_from_logits", "_effective_draft_sampler")),
)
MTPLX_REASONS = (
    Reason(
        "mtplx/generation.py",
        "1-17105",
        "macOS-only import: generation.py imports modules that load /usr/lib/libSystem.B.dylib at import",
    ),
)

MLX_LM_BROOMVA = (
    Scope(
        "mlx_lm/generate.py",
        ("speculative_generate_step", "is_mtp_drafter", "mtp_speculative_generate_step"),
    ),
    Scope("mlx_lm/models/gemma4_assistant.py"),
)
MLX_LM_BROOMVA_REASONS: tuple[Reason, ...] = ()

VLLM_MLX = (
    Scope("vllm_mlx/scheduler.py", ("_install_mtp", "_mtp_status_snapshot")),
    Scope(
        "vllm_mlx/mllm_batch_generator.py",
        ("_mark_mtp_attempts_on_primary_responses", "_draft_external_mtp_active_batch", "install_mtp_mllm"),
    ),
)
VLLM_MLX_REASONS: tuple[Reason, ...] = ()
