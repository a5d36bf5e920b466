"""Findings in the MLX speculative decoders (`make verify-peers PEERS=...`): strict expected failures by node id.

As `mlx_lm_real.known_bugs` does for mlx-lm: a property that fails on a package's own code is a finding, listed
here with what differs and a reproduction that runs in seconds; `mlx_peer_properties/conftest.py` marks each node a
strict expected failure, so a release that fixes it turns the run red until its row goes. A planted control (a
node whose id holds ``planted``) is expected to fail the same way: it is how we know the property has teeth there.
"""

from __future__ import annotations

from ncm_verify.peers.prefix_findings import PREFIX_FINDINGS, PREFIX_RAISES

PLANTED = "planted control: the package's own loop with one known-biased change; the property must catch it"

MLX_VLM_PROCESSORS_DROPPED = (
    "mlx-vlm 0.7.10 mlx_vlm/generate/ar.py:318-328,525-538: generate_step builds logits processors (logit_bias, "
    "repetition/presence/frequency penalties) and applies them in _step, but run_speculative_rounds is handed only "
    "the sampler: every token after the first ignores them, silently. Repro: "
    ".peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_processors.py"
)

MLX_VLM_BATCH_DFLASH_CRASH = (
    "mlx-vlm 0.7.10 mlx_vlm/speculative/utils.py:428 (eagle3: :379): generate_step with a batch of prompts and a "
    "DFlash drafter raises ValueError ('Cannot squeeze axis -1 with size 2'): run_speculative_rounds squeezes the "
    "first token [B] as if it were [B, 1] (its MTP branch reshapes instead). Repro: "
    ".peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_batch_dflash.py"
)

MLX_VLM_HYBRID_MTP_COMMIT = (
    "mlx-vlm 0.7.10 mlx_vlm/models/qwen3_5/speculative_verifier.py:221-226: the exact speculative verifier normalises "
    "the GatedDeltaNet q and k with rms_norm eps 1e-6, the model's own forward (language.py:1106-1113, "
    "_normalize_qk) with 1e-6 / head_k_dim, so every verify pass on a hybrid Qwen 3.5 target computes another "
    "conditional and commits another recurrent state than plain decoding. Not a rollback error and not roundoff: "
    "after an MTP round the committed cache is off a cache rebuilt from the accepted tokens in the engine's own "
    "passes (same chunking) by 3.4e-4 nats (round 1; 1.7e-4 at round 3), in float64 too (3.4e-4), while that rebuild "
    "is off an uncached pass by at most 2.2e-5; given the model's epsilon the committed cache is within 5.7e-6 of the "
    "rebuild. Repro: .peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_hybrid_mtp_commit.py"
)

DFLASH_TAPE_ON_CPU = (
    "dflash-mlx 0.1.8 dflash_mlx/engine/target_qwen_gdn.py:629-640 (the GatedDeltaNet hook off Metal): the "
    "innovation tape is computed from the block's initial state (state_in) at every step, not the state after the "
    "previous step, so RecurrentRollbackCache.rollback's tape replay restores a wrong recurrent state whenever a "
    "round accepts 1 draft or more (exact when it accepts 0); the next token's log-probabilities are off by "
    "~0.04 nats and the error carries into later rounds. On Metal, gated_delta_kernel_with_tape is used instead "
    "(not judged: no Metal here). Repro: .peers/dflash-mlx/bin/python mlx_peer_properties/repro/dflash_mlx_tape.py"
)
DFLASH_SERVER_IMPORT = (
    "dflash-mlx 0.1.8 declares mlx-lm>=0.31.0, but dflash_mlx/serve.py imports mlx_lm.generate.SequenceStateMachine, "
    "which mlx-lm 0.32.x removed (0.31.3 has it): `pip install dflash-mlx` resolves mlx-lm 0.32.2 and its server "
    "does not start. Repro: .peers/dflash-mlx/bin/python -c 'import dflash_mlx.serve'"
)
DFLASH_TREE_CAP_ONE = (
    "dflash-mlx 0.1.8 dflash_mlx/engine/spec_epoch.py:1292-1296, engine/ddtree.py:498-505: in tree mode (verify_mode "
    "ddtree) the drafter is asked for top-k rows over the capped verify length, so verify_len_cap=1 (--verify-len-cap "
    "1, accepted: 'Max tokens verified per target forward') leaves none and the first round raises RuntimeError "
    "('draft logits are empty'); block mode with the same cap decodes plain greedy tokens. Repro: "
    ".peers/dflash-mlx/bin/python mlx_peer_properties/repro/dflash_mlx_tree_cap.py"
)
DFLASH_SAMPLING_DROPPED = (
    "dflash-mlx 0.1.8 serve.py:312-330 reads temperature, top_p, top_k, min_p, the penalties, logit_bias and seed "
    "from a request; server/runtime.py:157-172 calls stream_dflash_generate with none of them (it has no such "
    "parameters and decodes greedily): a request for temperature 0.9 gets greedy tokens, no error. Repro: "
    "grep -n 'temperature\\|logit_bias' .peers/dflash-mlx/lib/python3.11/site-packages/dflash_mlx/serve.py "
    "and inspect.signature(dflash_mlx.runtime.stream_dflash_generate)"
)

BROOMVA_WRAPPED_RING = (
    "mlx-lm-broomva 0.31.3 mlx_lm/generate.py:881 (and :892): mtp_speculative_generate_step rolls back with "
    "cache.trim_prompt_cache(model_cache, num_draft - n) and ignores its result; once a sliding-window layer's "
    "RotatingKVCache has wrapped, trim_prompt_cache refuses (returns 0) and trims no layer at all, so rejected "
    "drafts stay attended in every layer (mlx-lm #1423's bug, carried into the MTP loop; the check at :725 "
    "passes while the ring is still empty). Repro: .peers/mlx-lm-broomva/bin/python "
    "mlx_peer_properties/repro/mlx_lm_broomva_ring.py"
)
BROOMVA_PROCESSOR_HISTORY = (
    "mlx-lm-broomva 0.31.3 mlx_lm/generate.py:808 and :852: the MTP loop hands every logits processor None for the "
    "token history (plain generate_step hands the prompt and generated tokens), so make_logits_processors' "
    "repetition penalty raises TypeError (len(None)), and a history-dependent processor cannot act per verify "
    "position. Repro: .peers/mlx-lm-broomva/bin/python mlx_peer_properties/repro/mlx_lm_broomva_processors.py"
)
BROOMVA_UNBOUNDED = (
    "mlx-lm-broomva 0.31.3 mlx_lm/generate.py:826: with max_tokens=-1 (documented: infinite) num_draft = "
    "min(num_draft_tokens, max(-1 - ntoks, 0)) = 0 every round: the drafter never runs and num_draft_tokens is "
    "ignored in silence (decoding stays correct, with no speed-up). Repro: .peers/mlx-lm-broomva/bin/python "
    "mlx_peer_properties/repro/mlx_lm_broomva_processors.py (prints the drafter's call count too)"
)

VLLM_TEXT_MTP_DEAD = (
    "vllm-mlx 0.6.0 vllm_mlx/scheduler.py:827-834: _install_mtp needs BatchGenerator._step, which mlx-lm 0.31.x "
    "removed, and vllm-mlx pins mlx-lm>=0.31.3,<0.32: with every mlx-lm its metadata admits, text MTP disables "
    "itself with a logged warning and the server decodes without it. Repro: .peers/vllm-mlx/bin/python -c "
    "'from mlx_lm.generate import BatchGenerator; print(hasattr(BatchGenerator, \"_step\"))'"
)

VLLM_MLLM_WRAPPED_RING = (
    "vllm-mlx 0.6.0 vllm_mlx/mllm_batch_generator.py:3191-3199, 3314-3323, 3349-3351: MLLMBatchGenerator's MTP "
    "round (install_mtp_mllm, external assistant drafter) rolls a rejected draft back with c.trim(...) only where "
    "c.is_trimmable(); once a sliding-window layer's BatchRotatingKVCache is full, is_trimmable() is False "
    "(mlx_vlm/models/cache.py:786), so (by its source) the round snapshots the ring's .state as if it were "
    "recurrent state and restores that instead of trimming: on mlx-vlm's Gemma 4 sliding-window target greedy "
    "tokens leave plain decoding's (alone: [1,1,1,1,0,1,3,1] vs [1,1,1,1,0,0,0,0], first divergent token 5; "
    "beside a second request at token 3); a copy of the caches fed one token gives log-probabilities off a rebuilt "
    "cache's by 0.34-2.1 nats, or raises ValueError ('[full] Negative dimensions'). Attention-only targets match. "
    "Repro: .peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_wrapped_ring.py"
)

VLLM_FULL_HIT_DUPLICATE = (
    "vllm-mlx 0.6.0 vllm_mlx/scheduler.py:2362-2385 (_schedule_waiting): a hit that leaves no prompt token to compute "
    "re-feeds the last prompt token onto a cache that already holds it, unless cache_hit_type is 'exact' or "
    "'supersequence' (the memory-aware cache's names); the legacy PrefixCacheManager (:2203) and the paged "
    "BlockAwarePrefixCache (:2136) call every hit 'hit', so with --no-memory-aware-cache the same prompt again, or a "
    "prefix of a stored prompt + completion, and with --use-paged-cache a prompt of whole stored blocks, attend to "
    "the last prompt token twice: the first token's log-probability off by 0.05-0.3 nats, greedy tokens differ. "
    "Repro: .peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_prefix_full_hit.py"
)
VLLM_PAGED_POSITION_BLIND = (
    "vllm-mlx 0.6.0 vllm_mlx/paged_cache.py:951-972 (find_shared_prefix) looks each block of a prompt up by "
    "find_cached_block(chunk), a hash of the block's tokens alone (:873, 'legacy string hash'), not the chained "
    "compute_block_hash(parent, tokens) of :40: a block stored at any position after any prefix is reused as the "
    "prompt's block, its keys rotated for the wrong positions (e.g. blocks stored at positions 4-15 served as "
    "0-11 for a prompt whose first token differs from the stored one: first token's log-probability off by 0.15 "
    "nats). Repro: .peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_paged_position.py"
)
VLLM_HYBRID_BATCH_PADDING = (
    "vllm-mlx 0.6.0 serving a qwen3_next (GatedDeltaNet hybrid) model: its scheduler decodes requests together in "
    "mlx-lm 0.31.3's BatchGenerator (the mlx-lm its pin admits), which pads a shorter prompt on the left, and that "
    "row's first token gets a conditional off the uncached one (0.38 nats for [18, 10, 10, 2] beside a 5-token "
    "prompt; 0.009 for [0, 0]); no cache involved (a fresh scheduler), exact on the attention and sliding models "
    "and for a request alone. The line at fault (in mlx-lm's batched recurrent path) is not pinned. Repro: "
    ".peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_hybrid_batch.py"
)
VLLM_PERSIST_FOREIGN_MODEL = (
    "vllm-mlx 0.6.0 vllm_mlx/memory_cache.py:978-1012 and :1015-1053: load_from_disk keeps a persisted cache when "
    "the model fingerprint (layers, sizes, model_type: the architecture only, not the weights) matches and the "
    "revision matches, but the revision is read from a _name_or_path the models vllm-mlx loads never carry, so it "
    "is 'unknown' for every model: a cache saved by one model is loaded into another of the same architecture (a "
    "model updated in place under the same name, whose cache directory ~/.cache/vllm-mlx/prefix_cache/<name> "
    "server.py:1649 is the same) and its keys are served from the other weights' KV: a continuation reusing 13 "
    "tokens off by 0.16-1.2 nats, greedy tokens differ (its class reported upstream for the legacy directory: "
    "'Legacy disk prefix-cache directory isn't keyed by artifact/dependency provenance', open). Repro: "
    ".peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_persist_foreign.py"
)
_VLLM_PREFIX = "mlx_peer_properties/test_vllm_mlx_prefix_cache.py::"
_VLLM_SERVED = "test_served_tokens_and_logprobs_equal_an_uncached_forward"
_BROOMVA = "mlx_peer_properties/test_mlx_lm_broomva.py::"
_BROOMVA_SAMPLED = "test_every_sampled_token_is_a_target_sampler_output_on_its_uncached_conditional"
_BROOMVA_CACHE = "test_the_prompt_cache_after_mtp_decoding_equals_one_rebuilt_from_the_tokens_it_claims"
_DFLASH = "mlx_peer_properties/test_dflash_mlx.py::"
MLX_VLM_HYBRID_PADDING = (
    "mlx-vlm 0.7.10, its server engine (mlx_vlm/generate/ar.py BatchGenerator, left-padded prefill "
    "_merge_prefill_prompt_kwargs :802) on a qwen3_5 (GatedDeltaNet hybrid) target: a request batched beside a "
    "longer one gets the wrong conditional from its first token (reported log-probabilities off by 0.05-1.7 nats; "
    "exact for equal lengths and for the Gemma 4 attention targets), so its tokens differ from the same request "
    "alone, with or without a drafter (SpeculativeGenerationBatch inherits it). The line at fault is not pinned. "
    "Repro: .peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_hybrid_padding.py"
)

MLX_VLM_EAGLE3_SEED = (
    "mlx-vlm 0.7.10 mlx_vlm/speculative/eagle3.py:177,187,203: the EAGLE-3 rounds draw the target's tokens with "
    "sampler(logits), the positioned sampler's unkeyed __call__ on MLX's global generator, not sample_target keyed "
    "by (seed, position) as plain decoding, DFlash and MTP do: a request's seed is ignored in silence (three calls "
    "with seed=3 give three different outputs; served requests differ from the same request alone). Repro: "
    ".peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_eagle3_seed.py"
)

BROOMVA_DRAFT_MODEL_RING = (
    "mlx-lm-broomva 0.31.3 mlx_lm/generate.py:589-591: speculative_generate_step's _rewind_cache ignores "
    "trim_prompt_cache's result; once a sliding-window RotatingKVCache wraps it refuses to trim and no layer is "
    "trimmed, so rejected drafts stay attended (greedy: [5, 3, 4, 1, 1, ...] against plain [5, 0, 2, 1, 0, ...], "
    "first divergent token at 1). The draft-model loop's copy of finding 8; upstream mlx-lm's issue on rotating "
    "caches in speculative decoding is open, its fix closed unmerged. Repro: .peers/mlx-lm-broomva/bin/python "
    "mlx_peer_properties/repro/mlx_lm_broomva_draft_model_ring.py"
)

MLX_VLM_EAGLE3_HOT_VOCAB = (
    "mlx-vlm 0.7.10 mlx_vlm/speculative/eagle3.py:295-339 (_eagle3_verify_target_hot, used at :430 and :597 whenever "
    "the drafter has a d2t map): with a draft vocabulary smaller than the target's, the verify pass takes the argmax "
    "of the target's logits over the draft vocabulary's tokens only (:322-324) and accepts a draft equal to it, so a "
    "target token outside the draft vocabulary is skipped at temperature 0 (plain [6, 10, 6, 6, 6, 11, 3, 3, 3, 3, ...]"
    ", EAGLE-3 [..., 3, 3, 3, 10, ...], first divergent token at 9) and, sampled, drafts are accepted by that argmax "
    "instead of a target draw (emitted tokens no target sampler call drew). Gemma 4 targets (logits_from_hidden); the "
    "Qwen 3.5 target verifies over the full vocabulary. Repro: .peers/mlx-vlm/bin/python "
    "mlx_peer_properties/repro/mlx_vlm_eagle3_hot_vocab.py"
)

MLX_VLM_DISK_FOREIGN_WEIGHTS = (
    "mlx-vlm 0.7.10 mlx_vlm/server/app.py:919-929: the server names APC's disk tier (on by default with APC) by "
    "apc_disk_namespace(model_path, adapter, KV quantization) and never passes its weights_fingerprint "
    "(apc.py:253-287), so the namespace hashes the model path string, not the weights: a model updated in place "
    "under the same path (a re-downloaded repository, a retrained local folder) restarts onto the old weights' "
    "blocks, and a prompt reusing 8 of its tokens is served from them (first token 13 where the uncached argmax "
    "is 23, 0.45 nats). Repro: .peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_disk_foreign.py"
)
_VLM_PREFIX = "mlx_peer_properties/test_mlx_vlm_prefix_cache.py::"
_VLM = "mlx_peer_properties/test_mlx_vlm.py::"
KNOWN_PEER_FINDINGS: dict[str, str] = {
    # node id -> what differs, where, and the reproduction
    f"{_VLM_PREFIX}test_the_disk_tier_serves_its_blocks_as_before_and_a_foreign_one_changes_nothing": (
        MLX_VLM_DISK_FOREIGN_WEIGHTS
    ),
    **{
        f"{_VLM}test_sampling_options_act_on_the_speculative_path_as_on_plain_decoding[{option}-{case}]": (
            MLX_VLM_PROCESSORS_DROPPED
        )
        for option in ("logit_bias", "repetition_penalty", "presence_penalty", "frequency_penalty")
        for case in ("hybrid-dflash", "hybrid-mtp", "attention-mtp", "sliding-window-mtp", "attention-eagle3")
    },
    f"{_VLM}test_a_batch_of_greedy_requests_gets_what_each_gets_alone[hybrid-dflash]": MLX_VLM_BATCH_DFLASH_CRASH,
    **{
        f"{_VLM}test_a_draft_vocabulary_smaller_than_the_targets_leaves_every_token_the_targets[{kind}-{mode}]": (
            MLX_VLM_EAGLE3_HOT_VOCAB
        )
        for kind in ("attention", "sliding-window")
        for mode in ("greedy", "sampled")
    },
    f"{_VLM}test_a_batch_of_greedy_requests_gets_what_each_gets_alone[attention-eagle3]": MLX_VLM_BATCH_DFLASH_CRASH,
    f"{_VLM}test_every_sampled_token_is_the_seeded_target_draw_on_the_uncached_conditional[attention-eagle3-own]": (
        MLX_VLM_EAGLE3_SEED
    ),
    f"{_VLM}test_requests_served_together_get_what_each_gets_alone[attention-eagle3]": MLX_VLM_EAGLE3_SEED,
    f"{_VLM}test_the_server_engine_hands_each_row_its_exact_conditional[hybrid]": MLX_VLM_HYBRID_PADDING,
    f"{_VLM}test_after_every_round_the_committed_cache_attends_as_one_rebuilt_from_the_accepted_tokens"
    "[hybrid-mtp-own]": MLX_VLM_HYBRID_MTP_COMMIT,
    f"{_VLM}test_a_short_request_served_beside_a_longer_one_on_a_hybrid_target[dflash]": MLX_VLM_HYBRID_PADDING,
    f"{_VLM}test_a_short_request_served_beside_a_longer_one_on_a_hybrid_target[mtp]": MLX_VLM_HYBRID_PADDING,
    **{
        f"{_DFLASH}test_after_every_round_the_rolled_back_caches_equal_caches_rebuilt_from_the_accepted_tokens"
        f"[hybrid-{mode}]": DFLASH_TAPE_ON_CPU
        for mode in ("dflash", "adaptive")  # adaptive starts in block mode
    },
    f"{_DFLASH}test_greedy_speculative_decoding_on_a_hybrid_target_after_a_partial_acceptance": DFLASH_TAPE_ON_CPU,
    f"{_DFLASH}test_every_sampling_field_the_server_reads_reaches_the_speculative_engine": DFLASH_SAMPLING_DROPPED,
    f"{_DFLASH}test_the_server_imports_with_the_mlx_lm_its_metadata_admits": DFLASH_SERVER_IMPORT,
    f"{_DFLASH}test_tree_mode_with_a_verify_length_cap_of_one_emits_plain_greedy_decoding": DFLASH_TREE_CAP_ONE,
    f"{_BROOMVA}test_greedy_mtp_decoding_emits_plain_greedy_decoding[sliding-window-own]": BROOMVA_WRAPPED_RING,
    f"{_BROOMVA}{_BROOMVA_SAMPLED}[sliding-window-own]": BROOMVA_WRAPPED_RING,
    f"{_BROOMVA}{_BROOMVA_CACHE}[sliding-window]": BROOMVA_WRAPPED_RING,
    f"{_BROOMVA}test_logits_processors_act_on_the_mtp_path_as_on_plain_decoding[repetition_penalty]": (
        BROOMVA_PROCESSOR_HISTORY
    ),
    f"{_BROOMVA}test_num_draft_tokens_is_honoured_for_an_unbounded_budget": BROOMVA_UNBOUNDED,
    f"{_BROOMVA}test_the_draft_model_loop_emits_plain_decoding_greedy_and_each_sampled_token_on_its_conditional"
    "[sliding-window]": BROOMVA_DRAFT_MODEL_RING,
    "mlx_peer_properties/test_vllm_mlx.py::test_text_mtp_installs_on_the_mlx_lm_its_pin_admits": VLLM_TEXT_MTP_DEAD,
    "mlx_peer_properties/test_vllm_mlx.py::test_greedy_requests_served_with_the_assistant_get_plain_decoding_each_alone"
    "[sliding-window]": VLLM_MLLM_WRAPPED_RING,
    **{
        f"{_VLLM_PREFIX}{_VLLM_SERVED}[legacy-attention-{dtype}]": VLLM_FULL_HIT_DUPLICATE
        for dtype in ("float32", "bfloat16")
    },
    **{
        f"{_VLLM_PREFIX}{_VLLM_SERVED}[paged-attention-{dtype}]": VLLM_FULL_HIT_DUPLICATE
        + " AND "
        + (VLLM_PAGED_POSITION_BLIND)
        for dtype in ("float32", "bfloat16")
    },
    f"{_VLLM_PREFIX}test_an_evicted_or_reused_entry_never_changes_what_a_prompt_gets[legacy-attention]": (
        VLLM_FULL_HIT_DUPLICATE
    ),
    **{
        f"{_VLLM_PREFIX}test_a_prompt_held_whole_gets_what_full_forwards_give[{mode}]": VLLM_FULL_HIT_DUPLICATE
        for mode in ("legacy", "paged")
    },
    f"{_VLLM_PREFIX}test_the_paged_cache_reports_the_reuse_its_chained_block_hash_documents": (
        VLLM_PAGED_POSITION_BLIND
    ),
    f"{_VLLM_PREFIX}test_paged_blocks_stored_after_another_prefix_are_not_served_at_the_start": (
        VLLM_PAGED_POSITION_BLIND
    ),
    f"{_VLLM_PREFIX}test_a_persisted_cache_serves_its_keys_as_before_and_a_foreign_one_changes_nothing": (
        VLLM_PERSIST_FOREIGN_MODEL
    ),
    f"{_VLLM_PREFIX}test_a_hybrid_request_batched_beside_a_longer_one_gets_its_uncached_conditional": (
        VLLM_HYBRID_BATCH_PADDING
    ),
    "mlx_peer_properties/test_vllm_mlx.py::test_after_every_step_the_batch_caches_attend_as_caches_rebuilt_from_the_"
    "tokens_they_hold[sliding-window]": VLLM_MLLM_WRAPPED_RING,
}

FINDING_RAISES: dict[str, tuple[type[BaseException], ...]] = {
    MLX_VLM_BATCH_DFLASH_CRASH: (ValueError,),
    BROOMVA_PROCESSOR_HISTORY: (TypeError, AssertionError),
    VLLM_MLLM_WRAPPED_RING: (AssertionError, ValueError),  # a restored ring may refuse the next token outright
    DFLASH_TREE_CAP_ONE: (RuntimeError,),
}
"""What a finding fails with when not an assertion: the package's own error."""

from ncm_verify.peers.mlx_findings_more import MORE_FINDING_RAISES, MORE_PEER_FINDINGS  # noqa: E402

KNOWN_PEER_FINDINGS.update(MORE_PEER_FINDINGS)
FINDING_RAISES.update(MORE_FINDING_RAISES)
KNOWN_PEER_FINDINGS.update(PREFIX_FINDINGS)  # the prefix caches' findings, kept in a table of their own
FINDING_RAISES.update(PREFIX_RAISES)
