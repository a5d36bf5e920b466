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

MLX_VLM_DRAFTER_CLASSES = (
    ("qwen3_5_mtp/qwen3_5_mtp.py", "Qwen3_5MTPDraftModel"),
    ("eagle3/eagle3.py", "Eagle3DraftModel"),
    ("qwen3_dflash/dflash.py", "DFlashDraftModel"),
    ("gemma4_assistant/gemma4_assistant.py", "Gemma4AssistantDraftModel"),
)
BIND = "binding to target variants (untied or quantised heads, other model layouts)"

MLX_VLM_REASONS = (
    *(
        Reason(f"mlx_vlm/speculative/drafters/{path}", f"{name}.sanitize", LOADING)
        for path, name in MLX_VLM_DRAFTER_CLASSES
    ),
    *(
        Reason(f"mlx_vlm/speculative/drafters/{path}", f"{name}.bind", BIND, True)
        for path, name in MLX_VLM_DRAFTER_CLASSES
    ),
    Reason("mlx_vlm/speculative/drafters/*/parity_check.py", WHOLE, "a parity script against Hugging Face weights"),
    Reason("mlx_vlm/speculative/drafters/qwen3_5_mtp/split.py", WHOLE, LOADING + ": splits a full checkpoint"),
    Reason("mlx_vlm/speculative/drafters/qwen3_dflash/config.py", "DFlashConfig.from_dict", LOADING, True),
    Reason("mlx_vlm/speculative/drafters/eagle3/config.py", "Eagle3Config.from_dict", LOADING, True),
    Reason("mlx_vlm/speculative/drafters/eagle3/config.py", "Eagle3Config.__post_init__", LOADING, True),
    Reason("mlx_vlm/speculative/drafters/eagle3/config.py", "TextConfig.__post_init__", LOADING, True),
    Reason(
        "mlx_vlm/speculative/drafters/gemma4_assistant/config.py", "Gemma4AssistantConfig.__post_init__", LOADING, True
    ),
    Reason("mlx_vlm/speculative/drafters/qwen3_5_mtp/config.py", "Qwen3_5MTPConfig.__post_init__", LOADING, True),
    Reason("mlx_vlm/speculative/ddtree.py", WHOLE, "dead code: build_ddtree is exported and called nowhere in mlx-vlm"),
    Reason(
        "mlx_vlm/speculative/common.py",
        "_format_speculative_stats",
        "not the speculative path: verbose statistics printing",
        speculative=False,
    ),
    Reason(
        "mlx_vlm/speculative/common.py",
        "speculative_stats_since",
        "not the speculative path: acceptance statistics for verbose output",
        speculative=False,
    ),
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
    Reason(
        "mlx_vlm/speculative/*.py",
        r"re:eos|stop_|StopCondition|stopping",
        "stop tokens inside a round: the properties decode to a token budget",
        True,
    ),
    Reason(
        "mlx_vlm/sample_utils.py",
        "apply_xtc",
        "XTC: make_sampler takes it, generate_step and the engine do not (no xtc parameter reaches the sampler)",
        True,
    ),
    Reason("mlx_vlm/speculative/drafters/gemma4_assistant/masks.py", "_broadcast_batch_vector", BATCH_RAGGED, True),
    Reason("mlx_vlm/speculative/utils.py", "get_speculative_rounds_batch", BATCH_RAGGED, True),
    Reason(
        "mlx_vlm/speculative/cache_state.py",
        "rollback_speculative_cache",
        "legacy model adapters returning their own rollback state (other model families)",
        True,
    ),
    Reason(
        "mlx_vlm/*/*.py",
        r"re:% 256 == 0|% DEFAULT_CACHE_EVAL_INTERVAL",
        "not the speculative path: memory housekeeping (mx.clear_cache) every 256 tokens",
        speculative=False,
    ),
    Reason(
        "mlx_vlm/speculative/*.py",
        r"re:while emitted < max_tokens|if bs <= 1",
        "the round loop's exits other than its budget return: a block of one token (no draft left)",
        True,
    ),
    Reason(
        "mlx_vlm/speculative/*.py",
        r"re:hasattr\(embed, \"scales\"\)|if quantized",
        "quantised embeddings (published checkpoints): the properties build float32 models",
        True,
    ),
    Reason(
        "mlx_vlm/generate/ar.py",
        r"re:prompt_cache_checkpoint|checkpoint_lengths|thinking_budget|decoder_input_ids|cross_attention_states"
        r"|logits_processors is not None",
        "server and encoder-decoder features: prompt-cache checkpoints, thinking budgets, encoder-decoder targets, "
        "extra logits processors",
        True,
    ),
    Reason(
        "mlx_vlm/speculative/*.py",
        r"re:callable\((choose_block_ceiling|choose_initial_block_size|prefill_draft|verify_logits|sample_proposal"
        r"|verify_hidden)\)|hasattr\(lm, \"rollback_speculative_cache\"\)",
        "hooks other model families provide (block ceilings, draft prefill, verify hooks): absent on these targets",
        True,
    ),
    Reason("mlx_vlm/generate/ar.py", "SpeculativeGenerationBatch.next", BATCH_RAGGED, True),
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
INSTRUMENTATION = (
    "not the speculative path: instrumentation (cycle profiling, memory sampling, telemetry events, yield-pause "
    "timing), off by default, emitting nothing the tokens or caches depend on"
)
SNAPSHOTS = (
    "not the speculative path: the server's prefix-cache snapshots (publication at prefix boundaries and after a "
    "generation, restore from one) and its Metal memory housekeeping (mx.clear_cache at boundaries); the prefix "
    "caches are judged by their own properties"
)

DFLASH_MLX_REASONS = (
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        r"re:profile_cycles|sample_memory_cycle|evt is not None|memory_waterfall|_clear_at|if self\.enabled"
        r"|clear_cache_boundaries|callable\((synchronize|clear_cache)\)",
        INSTRUMENTATION,
        speculative=False,
    ),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        r"re:snapshot|prefix_cache_active|snap_prefix_len|publication is None|end_target_hidden is None"
        r"|last_cycle_logits is not None|prefill_logits is None|snapshot_boundary",
        SNAPSHOTS,
        speculative=False,
    ),
    *(
        Reason("dflash_mlx/engine/spec_epoch.py", name, why, speculative=False)
        for name, why in (
            ("_publish_snapshot_event", SNAPSHOTS),
            ("SpeculativeSession._run_generation_snapshot_events", SNAPSHOTS),
            ("SpeculativeSession.clear_cache_boundary", SNAPSHOTS),
            ("SpeculativeSession.memory_waterfall_event", INSTRUMENTATION),
            ("_SessionRequest.should_collect_generation_snapshot_hidden", SNAPSHOTS),
        )
    ),
    Reason("dflash_mlx/engine/spec_epoch.py", "SpeculativeSession._run_prefill_events", SERVER, True),
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
    Reason(
        "dflash_mlx/engine/ddtree.py",
        r"re:strategy (==|!=) \"(first|margin)\"|for pos in range\(min\(len\(top_values_desc",
        'dead code on the engine\'s path: its one caller (spec_epoch.py, tree mode) passes strategy="first"; the '
        '"margin" ordering and the unknown-strategy error are never taken',
        dead=True,
    ),
    Reason(
        "dflash_mlx/engine/ddtree.py",
        r"re:isinstance\((value|captured), (list|dict|tuple)\)|value\.ndim >= 2 and",
        "generic attribute cloning and batch selection: containers (lists, tuples, dicts) and array shapes the "
        "caches built here do not hold",
        True,
    ),
    Reason(
        "dflash_mlx/engine/ddtree.py",
        "flat_tree_path_token_ids",
        "dead code: called nowhere in dflash-mlx (its tree paths are built by build_flat_ddtree)",
    ),
    Reason("dflash_mlx/engine/ddtree.py", "pad_flat_tree_paths", "dead code: called nowhere in dflash-mlx"),
    Reason(
        "dflash_mlx/engine/copyspec.py",
        r"re:if window is None|if not self._matches_window|^\s*if len\(self._tokens\) < self.window_size"
        r"|len\(self._tokens\) \+ 1 < self.window_size|if start < 0 or source_pos",
        "guards the index's invariants leave untaken: an enabled index holds more tokens than its window (a tail "
        "window always exists), and an indexed window matches its source unless the 64-bit FNV hash collides",
        dead=True,
    ),
    Reason(
        "dflash_mlx/engine/ddtree.py",
        r"re:if len\(posterior_token_ids\) < tree.size|if top_width <= 0",
        "argument checks the engine's calls always pass: a posterior for every tree slot, a positive top-k width",
        dead=True,
    ),
    Reason(
        "dflash_mlx/model.py",
        r"re:if cache is None:",
        "dead on the engine's path: it always hands the drafter its context caches",
        dead=True,
    ),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        "1243",
        "not the speculative path: Metal memory housekeeping (clear_cache every few thousand tokens)",
        speculative=False,
    ),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        "1981",
        "not the speculative path: Metal memory housekeeping (clear_cache every few thousand tokens)",
        speculative=False,
    ),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        "1571",
        "tree branches drafted as a batch: wide trees with several branches per depth",
        True,
    ),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        "2011-2030",
        "the block round's profiled twin: runs only with cycle profiling on (a diagnostics option)",
        True,
    ),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        "2053",
        "a copy draft found on a round with no prefetched block: the drawn prompts find theirs in the prefetch",
        True,
    ),
    Reason("dflash_mlx/model.py", "DFlashDraftModelArgs", LOADING, True),
    Reason("dflash_mlx/model.py", "build_target_layer_ids", LOADING, True),
    Reason("dflash_mlx/model.py", "_default_draft_layer_types", LOADING, True),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        r"re:stop_token|stop_hit",
        "stop tokens: the properties decode to a token budget without stop tokens",
        True,
    ),
    Reason(
        "dflash_mlx/engine/ddtree.py",
        "build_flat_ddtree",
        "tree shapes the drafter's scores make: ties, exhausted candidate heaps and budgets larger than the tree",
        True,
    ),
    Reason(
        "dflash_mlx/recurrent_rollback_cache.py",
        "RecurrentRollbackCache",
        "recurrent cache paths outside one request's rounds: batch extend, masks, conv rebuild without a tape",
        True,
    ),
    Reason(
        "dflash_mlx/model.py",
        "ContextOnlyDraftKVCache",
        "the drafter's context window: drafters configured with a sliding context window",
        True,
    ),
    Reason(
        "dflash_mlx/model.py",
        "DFlashAttention",
        "drafter attention variants: sliding context windows, projected context caches",
        True,
    ),
    Reason(
        "dflash_mlx/model.py",
        "FullContextDraftKVCache",
        "the drafter's full-context cache: drafters configured without a context window",
        True,
    ),
    Reason(
        "dflash_mlx/engine/*.py",
        r"re:max_new_tokens > 0|>= max_new_tokens|if not paths|resolved_len <= 0|limit <= 0",
        "budget edges: a budget of 0 tokens, or one reached inside a round's bookkeeping",
        True,
    ),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        r"re:draft_source == \"copyspec\"|copyspec_|acceptance_len == 0|adaptive_cycle_cost_ns",
        "copy-speculation statistics in block mode and adaptive cost accounting",
        True,
    ),
    Reason(
        "dflash_mlx/engine/spec_epoch.py",
        r"re:supports_prefix_snapshot|runtime_context is None|projected_ctx >= dflash_max_ctx",
        "runtime setup: prefix snapshots (server), a context longer than the drafter's maximum",
        True,
    ),
    Reason(
        "dflash_mlx/engine/ddtree.py",
        r"re:suppress_token_mask is not None|draft_dtype is not None|pad_len > 0|prefix_tokens.shape\[0\]\) > int",
        "tree drafting options: suppressed tokens in tree mode, draft dtype casts, prefixes longer than a block",
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
        "mtplx/cache_state.py",
        "trim_verified_window_to_prefix",
        "declines other than recurrent state and a wrapped ring (malformed counts, caches without offsets)",
        True,
    ),
    Reason(
        "mtplx/cache_state.py",
        "trim_verified_window_without_snapshot",
        "an empty cache list",
        True,
    ),
    Reason(
        "mtplx/cache_state.py",
        "_restore_state_preserving_container",
        "caches exposing replace_state (mtplx's own cache classes, built by generation.py)",
        True,
    ),
    Reason(
        "mtplx/sampling.py",
        "NonFiniteLogitsError",
        "error reporting for non-finite logits: the properties feed finite rows",
        True,
    ),
    Reason("mtplx/sampling.py", "SparseDistribution.__post_init__", "malformed sparse rows are refused", True),
    Reason(
        "mtplx/sampling.py",
        r"re:not np\.isfinite\(total\) or total <= 0",
        "a numerically empty residual (p = q on the support): no drawn example had one",
        True,
    ),
    Reason(
        "mtplx/sampling.py",
        "speculative_output_marginal",
        "an analysis helper (the rule's marginal), not called by the loop",
        True,
    ),
    Reason(
        "mtplx/qwen4_block_verify.py",
        "build_verifier",
        "a batched target row with no mass (each row is also judged through the list entry)",
        True,
    ),
    Reason(
        "mtplx/qwen4_block_verify.py",
        "water_fill_lambda",
        "water-fill edges (no active weight left before the target, a target past every breakpoint): float64 "
        "boundary values the drawn rows do not reach",
        True,
    ),
    Reason(
        "mtplx/qwen4_block_verify.py",
        r"re:if coin > ONE|if q_value <= ZERO|token_ids.size == 0 or wanted.size == 0",
        "guards the ladder cannot reach: a coin above 1 (realised <= reach by construction), a drafted token outside "
        "its own draft row, an empty prepared row (prepared_pair returns None first)",
        True,
    ),
    Reason(
        "mtplx/qwen4_block_verify.py",
        "prepared_pair",
        "host rows given as sparse objects or with mismatched ids: the property hands dense rows",
        True,
    ),
    Reason(
        "mtplx/sampling.py",
        "_vocab_size",
        "dead exit: its one caller (residual_distribution with p and q both sparse) hands it a sparse p only",
        dead=True,
    ),
    Reason("mtplx/qwen4_block_verify.py", "_env_truthy", "the environment gate (MTPLX_QWEN4_BLOCK_VERIFY)", True),
    Reason("mtplx/qwen4_block_verify.py", "_read_gate", "the environment gate (MTPLX_QWEN4_BLOCK_VERIFY)", True),
    Reason("mtplx/qwen4_block_verify.py", "refresh_from_env", "the environment gate", True),
    Reason("mtplx/qwen4_block_verify.py", "_configure_for_test", "mtplx's own test hook", True),
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
MLX_LM_BROOMVA_REASONS = (
    Reason("mlx_lm/models/gemma4_assistant.py", "Model.sanitize", LOADING),
    Reason("mlx_lm/models/gemma4_assistant.py", "Model.quant_predicate", LOADING + " (quantisation)"),
    Reason("mlx_lm/models/gemma4_assistant.py", "ModelArgs.__post_init__", LOADING, True),
    Reason("mlx_lm/generate.py", r"re:while y.size > 1", "prompts longer than the prefill step (2048)", True),
)

VLLM_MLX = (
    Scope("vllm_mlx/scheduler.py", ("_install_mtp", "_mtp_status_snapshot")),
    Scope(
        "vllm_mlx/mllm_batch_generator.py",
        ("_mark_mtp_attempts_on_primary_responses", "_draft_external_mtp_active_batch", "install_mtp_mllm"),
    ),
)
TEXT_MTP_DEAD = (
    "finding 11: _install_mtp returns before installing on mlx-lm 0.31.x (no BatchGenerator._step), so its rounds "
    "never run on the mlx-lm vllm-mlx's pin admits"
)

VLLM_MLX_REASONS = (
    Reason("vllm_mlx/scheduler.py", "_install_mtp._mtp_step", TEXT_MTP_DEAD),
    Reason("vllm_mlx/scheduler.py", "_install_mtp._mtp_next", TEXT_MTP_DEAD),
    Reason("vllm_mlx/scheduler.py", "_install_mtp._mtp_bypass_reasons", TEXT_MTP_DEAD),
    Reason("vllm_mlx/scheduler.py", "_install_mtp._record_mtp_bypass", TEXT_MTP_DEAD),
    Reason("vllm_mlx/scheduler.py", "_install_mtp._get_mtp_stats", TEXT_MTP_DEAD),
    Reason("vllm_mlx/scheduler.py", "_install_mtp._drain_mtp_uid_deltas", TEXT_MTP_DEAD),
    Reason("vllm_mlx/scheduler.py", "864-1333", TEXT_MTP_DEAD),
    Reason("vllm_mlx/scheduler.py", r"re:if not hasattr\(batch_gen, \"_step\"\)", TEXT_MTP_DEAD, dead=True),
    Reason(
        "vllm_mlx/scheduler.py",
        "_mtp_status_snapshot",
        "not the speculative path: the server's status endpoint",
        speculative=False,
    ),
    Reason(
        "vllm_mlx/mllm_batch_generator.py",
        r"re:if isinstance\(hidden, list\)|if hasattr\(_c, \"state\"\)",
        "model outputs and caches of other families: hidden states returned as a list, a recurrent cache without state",
        True,
    ),
    Reason(
        "vllm_mlx/mllm_batch_generator.py",
        r"re:if no_active_batch_bypass|if responses:|if uid in prev_deferred|if batch is not None"
        r"|for e, bu in enumerate\(batch.uids\)",
        "engine states between requests: a step with no active batch or no response (chunked prefill), a deferred "
        "draft whose request left the batch in that step",
        True,
    ),
    Reason(
        "vllm_mlx/mllm_batch_generator.py",
        "3099-3108",
        "dead code: the MTP step returns to the plain step (logits_processors_bypass) whenever a request has "
        "logits processors, so its round never applies them",
        dead=True,
    ),
    Reason(
        "vllm_mlx/mllm_batch_generator.py",
        r"re:if samplers and any\(samplers\)",
        "dead exit: every request gets its own sampler (make_sampler in its insertion), so a batch's samplers are "
        "never all absent on the MTP round",
        dead=True,
    ),
    Reason(
        "vllm_mlx/mllm_batch_generator.py",
        r"re:stop_tokens|max_tokens\[|draft_end_uids|if keep",
        "a request finishing inside a round (stop token or budget reached by an accepted draft): not yet judged",
        True,
    ),
    Reason(
        "vllm_mlx/mllm_batch_generator.py",
        r"re:uses_stochastic_sampling",
        "sampled rounds with the external assistant drafter: judged greedy and on the native head only",
        True,
    ),
    Reason(
        "vllm_mlx/mllm_batch_generator.py",
        r"re:rerun_hidden|rerun_out|prefill_bypass|skip_entries|hidden_states is None|if not shared_kv",
        "hidden-state reruns and bypasses for targets without captured hidden states or shared K/V",
        True,
    ),
    Reason(
        "vllm_mlx/mllm_batch_generator.py",
        r"re:total % 50|num_draft_tokens != 1",
        "not the speculative path: periodic statistics logging and the warning for more than one draft token",
        speculative=False,
    ),
)
