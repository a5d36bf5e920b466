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
WHOLE = "1-100000"
"""A whole file, for `Reason.lines`."""
LOADING = "not the speculative path: checkpoint loading (weight renaming, config variants of published checkpoints)"
BATCH_RAGGED = (
    "batched rounds whose rows accept different counts or finish at different steps (filter, extend, ragged "
    "replay): the batch properties decode rows of one length and budget"
)
ADAPTIVE = "adaptive block sizing: driven by acceptance statistics over many rounds or by environment variables"

MLX_VLM_REASONS = (
    Reason("mlx_vlm/speculative/drafters/*/parity_check.py", WHOLE, "a parity script against Hugging Face weights"),
    Reason("mlx_vlm/speculative/drafters/qwen3_5_mtp/split.py", WHOLE, LOADING + ": splits a full checkpoint"),
    Reason("mlx_vlm/speculative/drafters/qwen3_5_mtp/qwen3_5_mtp.py", "Qwen3_5MTPDraftModel.sanitize", LOADING),
    Reason("mlx_vlm/speculative/drafters/eagle3/eagle3.py", "Eagle3DraftModel.sanitize", LOADING),
    Reason("mlx_vlm/speculative/drafters/qwen3_dflash/dflash.py", "DFlashDraftModel.sanitize", LOADING),
    Reason(
        "mlx_vlm/speculative/drafters/gemma4_assistant/gemma4_assistant.py",
        "Gemma4AssistantDraftModel.sanitize",
        LOADING,
    ),
    Reason("mlx_vlm/speculative/drafters/qwen3_dflash/config.py", "DFlashConfig.from_dict", LOADING, True),
    Reason("mlx_vlm/speculative/drafters/eagle3/config.py", "Eagle3Config.from_dict", LOADING, True),
    Reason("mlx_vlm/speculative/drafters/eagle3/config.py", "Eagle3Config.__post_init__", LOADING, True),
    Reason("mlx_vlm/speculative/drafters/eagle3/config.py", "TextConfig.__post_init__", LOADING, True),
    Reason(
        "mlx_vlm/speculative/drafters/gemma4_assistant/config.py", "Gemma4AssistantConfig.__post_init__", LOADING, True
    ),
    Reason("mlx_vlm/speculative/drafters/qwen3_5_mtp/config.py", "Qwen3_5MTPConfig.__post_init__", LOADING, True),
    Reason("mlx_vlm/speculative/ddtree.py", WHOLE, "dead code: build_ddtree is exported and called nowhere in mlx-vlm"),
    Reason("mlx_vlm/speculative/common.py", "_format_speculative_stats", "verbose statistics printing", True),
    Reason("mlx_vlm/speculative/common.py", "speculative_stats_since", "verbose statistics", True),
    Reason(
        "mlx_vlm/speculative/drafters/qwen3_5_mtp/qwen3_5_mtp.py",
        "Qwen3_5MTPDraftModel.accept_verified_tokens_batch",
        BATCH_RAGGED,
        True,
    ),
    Reason(
        "mlx_vlm/speculative/drafters/qwen3_5_mtp/qwen3_5_mtp.py",
        "Qwen3_5MTPDraftModel.filter_batch",
        BATCH_RAGGED,
        True,
    ),
    Reason(
        "mlx_vlm/speculative/drafters/eagle3/eagle3.py",
        "Eagle3DraftModel.accept_verified_tokens_batch",
        BATCH_RAGGED,
        True,
    ),
    Reason("mlx_vlm/speculative/drafters/eagle3/eagle3.py", "Eagle3DraftModel.filter_batch", BATCH_RAGGED, True),
    Reason("mlx_vlm/speculative/drafters/eagle3/eagle3.py", "Eagle3DraftModel.batch_size", BATCH_RAGGED, True),
    Reason("mlx_vlm/generate/ar.py", "SpeculativeGenerationBatch.filter", BATCH_RAGGED, True),
    Reason("mlx_vlm/generate/ar.py", "SpeculativeGenerationBatch.extend", BATCH_RAGGED, True),
    Reason("mlx_vlm/speculative/cache_state.py", "_trim_append_caches", BATCH_RAGGED + "; legacy adapters", True),
    Reason("mlx_vlm/speculative/common.py", "_prepare_ragged_mtp_replay", BATCH_RAGGED, True),
    Reason("mlx_vlm/speculative/utils.py", "SpeculativePrefill.filter", BATCH_RAGGED, True),
    Reason(
        "mlx_vlm/speculative/mtp.py",
        "_mtp_rounds_batch",
        BATCH_RAGGED + "; on the hybrid target the batch needs uniform acceptance",
        True,
    ),
    Reason(
        "mlx_vlm/speculative/eagle3.py",
        "_eagle3_rounds_batch",
        "batched EAGLE-3 generate_step raises before its rounds (finding 3); the server engine's batches are judged "
        "on one length",
        True,
    ),
    Reason(
        "mlx_vlm/speculative/dflash.py",
        "_dflash_rounds_batch",
        "batched DFlash generate_step raises before its rounds (finding 3); the server engine's batches are judged "
        "on one length",
        True,
    ),
    Reason("mlx_vlm/speculative/dflash.py", "_dflash_next_block_size", ADAPTIVE, True),
    Reason("mlx_vlm/speculative/eagle3.py", "_eagle3_next_block_size", ADAPTIVE, True),
    Reason("mlx_vlm/speculative/eagle3.py", "_eagle3_block_tiers", ADAPTIVE, True),
    Reason("mlx_vlm/speculative/eagle3.py", "_eagle3_block_settings", ADAPTIVE, True),
    Reason("mlx_vlm/speculative/mtp.py", "_effective_mtp_block_size", ADAPTIVE, True),
    Reason(
        "mlx_vlm/speculative/eagle3.py",
        "_eagle3_hot_logits_from_hidden",
        "a draft vocabulary smaller than the target's (EAGLE-3 hot tokens, d2t): not yet built by the adapter",
        True,
    ),
    Reason(
        "mlx_vlm/speculative/eagle3.py", "_eagle3_hot_token_ids", "EAGLE-3 hot-token vocabulary: not yet built", True
    ),
    Reason(
        "mlx_vlm/speculative/eagle3.py",
        "_eagle3_verify_target_hot",
        "EAGLE-3 hot-token vocabulary: not yet built",
        True,
    ),
    Reason(
        "mlx_vlm/speculative/drafters/eagle3/eagle3.py",
        "Eagle3DraftModel._draft_to_target",
        "EAGLE-3 d2t: not yet built",
        True,
    ),
    Reason(
        "mlx_vlm/speculative/mtp.py",
        "_mtp_verify_target",
        "target-verify fallbacks for models without the exact verifier or logits (other model families)",
        True,
    ),
    Reason("mlx_vlm/speculative/mtp.py", "_mtp_verify_without_logits", "models whose verify pass skips logits", True),
    Reason("mlx_vlm/speculative/mtp.py", "_speculative_walk_batch_deferred_greedy", BATCH_RAGGED, True),
    Reason("mlx_vlm/speculative/mtp.py", "_mtp_logits_from_hidden", "drafters that return hidden states only", True),
    Reason(
        "mlx_vlm/speculative/cache_state.py",
        "SpeculativeCacheTransaction.abort",
        "an exception inside a round: the properties raise none there",
        True,
    ),
    Reason(
        "mlx_vlm/speculative/cache_state.py",
        "_RotatingCacheTransaction.commit",
        "rotating-ring replay across several rows and lengths: one sliding-window request at a time here",
        True,
    ),
)

DFLASH_MLX = (
    Scope("dflash_mlx/engine/spec_epoch.py"),
    Scope("dflash_mlx/engine/ddtree.py"),
    Scope("dflash_mlx/engine/copyspec.py"),
    Scope("dflash_mlx/engine/acceptance.py"),
    Scope("dflash_mlx/recurrent_rollback_cache.py"),
    Scope("dflash_mlx/model.py"),
)
SERVER = "server-only: the prefix cache, snapshots and memory telemetry the server's runtime drives"

DFLASH_MLX_REASONS = (
    Reason("dflash_mlx/engine/spec_epoch.py", "SpeculativeSession._run_prefill_events", SERVER, True),
    Reason("dflash_mlx/engine/spec_epoch.py", "SpeculativeSession._run_generation_snapshot_events", SERVER, True),
    Reason("dflash_mlx/engine/spec_epoch.py", "_publish_snapshot_event", SERVER, True),
    Reason("dflash_mlx/engine/spec_epoch.py", "SpeculativeSession.clear_cache_boundary", SERVER, True),
    Reason("dflash_mlx/engine/spec_epoch.py", "SpeculativeSession.memory_waterfall_event", SERVER, True),
    Reason(
        "dflash_mlx/engine/spec_epoch.py", "_SessionRequest.should_collect_generation_snapshot_hidden", SERVER, True
    ),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        "_AdaptiveBlockPolicy",
        "adaptive block policy: probes and window statistics driven by measured tokens per second",
        True,
    ),
    Reason(
        "dflash_mlx/engine/ddtree.py",
        "draft_branch_blocks_batch",
        "tree branches drafted as a batch: wide trees with several branches per depth",
        True,
    ),
    Reason("dflash_mlx/engine/ddtree.py", "verify_candidates_batch", "tree candidates verified as a batch", True),
    Reason("dflash_mlx/model.py", "DFlashDraftModelArgs", LOADING, True),
    Reason("dflash_mlx/model.py", "build_target_layer_ids", LOADING, True),
    Reason("dflash_mlx/model.py", "_default_draft_layer_types", LOADING, True),
    Reason(
        "dflash_mlx/model.py",
        "FullContextDraftKVCache",
        "the drafter's full-context cache: drafters configured without a context window",
        True,
    ),
)

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
