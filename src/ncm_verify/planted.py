"""The planted bugs' names and what each gets wrong, stated once: the report reads them without loading any.

Each is a module of `ncm_verify.mutants` (``--impl ncm_verify.mutants.NAME``); `make test` fails unless each is caught.
"""

MUTANTS = {
    "ratio_inverted": "accepts with min(1, q/p) instead of min(1, p/q)",
    "residual_unnormalised": "inverse-CDF draw from max(p - q, 0) without normalising it",
    "residual_flipped": "corrects from max(q - p, 0) instead of max(p - q, 0)",
    "resample_from_target": "corrects from p instead of the residual",
    "resample_from_draft": "corrects from q instead of the residual",
    "shared_uniform": "one uniform shared by every position of a block",
    "bonus_wrong_row": "draws the bonus token from the last draft's target row",
    "rows_off_by_one": "judges draft i against target row i + 1",
    "u_zero_accepts": "uniforms in [0, 1) and acceptance u <= p/q: u = 0 accepts p(x) = 0",
    "latent_mismatch": "after a changed latent, verifies the old drafts as if drafted under the new one",
    "small_residual_falls_back_to_target": "treats a residual of mass below 1e-4 as zero and corrects from p",
    "ids_truncated_to_16_bits": "the chain kernel keeps draft ids as uint16: id 65 541 is judged and emitted as 5",
    "nan_rows_pass_validation": "chain and greedy validation lets probability or score rows holding NaN through",
    "ratio_in_half": "rounds the acceptance ratio p/q to float16 (P(accept) off by up to 2.4e-4 relative)",
    "residual_swapped_when_small": "corrects from max(q - p, 0) when max(p - q, 0) has mass below 1e-4",
    "correction_cumsum_in_half": "accumulates the correction's inverse CDF in float16",
    "correction_cdf_in_bfloat16_for_half_inputs": (
        "for float16 or bfloat16 rows the correction's inverse CDF is accumulated in bfloat16"
    ),
    "block_weight_in_half_for_half_inputs": (
        "for float16 or bfloat16 rows block verification keeps its prefix weight in that half precision"
    ),
    "correction_threshold_moved_at_large_vocab": (
        "above 2^16 ids the correction's inverse CDF moves its threshold u * total up by 1e-6 of itself"
    ),
    "draft_ids_16_bit": "the chain kernel reads draft ids as 16 bits: id 65 541 is read and kept as 5",
    "greedy_ties_to_the_last_maximum": "greedy verification breaks tied maxima toward the last index, not the first",
    "apply_chain_reuses_rejecting_uniform": "apply_chain alone draws the correction with the uniform that rejected",
    "verify_chain_swaps_uniform_rows": "verify_chain alone hands apply_chain its uniform rows swapped",
    "residual_floor_too_high": "treats a residual of mass below 1e-6 as zero and corrects from p",
    "apply_latent_chain_shares_the_latent_uniform": (
        "apply_latent_chain alone draws the latent and its tokens with one uniform"
    ),
    "residual_summed_in_one_pass": (
        "residual_distribution normalises by a one-pass float32 sum (1.3e-4 off on a real SmolLM2 row, V = 49 152)"
    ),
    "rare_residuals_evened": "the correction evens out the residual mass of its rare tokens (each below 1e-3 of it)",
    "smallest_token_over_emitted": "the correction gives its least likely possible token 5% of the residual mass more",
    "cache_key_without_fingerprint": "prefix cache keys leave out the model's weights fingerprint",
    "cache_key_drops_last_token": "prefix cache keys hold every prefix token but the last",
    "cache_namespace_ignored": "prefix cache keys leave out the tenant namespace",
    "level_tokens_under_other_latent": "level drafting: tokens drafted under another latent than the one verified",
    "level_rejected_kv_kept": "level drafting: a changed level keeps the K/V of its rejected draft",
    "level_corrected_tokens_not_redrawn": (
        "level drafting: a corrected latent's tokens come from the drafted latent's rows"
    ),
    "cache_lru_ignores_hits": "prefix cache hits do not refresh recency: first-in-first-out eviction",
    "cache_key_uint16_tokens": "prefix cache keys pack token ids as uint16 (id 65 541 serves the entry of id 5)",
    "cache_replace_keeps_recency": "prefix cache storing under a held key leaves it where it was in the LRU order",
    "cache_load_drops_namespace": "prefix cache files load every entry under the empty namespace",
    "tree_no_residual_update": "tree: a rejected child leaves the residual as it was (every sibling judged against p)",
    "tree_without_replacement_unrenormalised": "tree: children drawn without replacement judged against q itself",
    "tree_top_k_as_sampled": "tree: deterministic top-k children judged as if sampled from q",
    "tree_correction_from_target": "tree: the correction after every child is rejected drawn from p, not the residual",
    "tree_bonus_from_residual": "tree: the bonus after an accepted leaf drawn from max(p - q, 0) of the leaf's rows",
    "tree_parent_off_by_one": "tree: each node's parent index read one too low",
    "block_tokenwise_acceptance": "block: each draft judged token-wise, u q(x) < p(x), up to the first rejection "
    "(vllm-ascend#7807)",
    "block_tokenwise_residual": "block: the correction drawn from max(p - q, 0), not max(w p - q, 0) "
    "(vllm-ascend#7807)",
    "block_draft_probability_one": "block: q(x) = 1 in the prefix weights, as for drafts without probabilities "
    "(vllm-ascend#7603)",
    "block_stops_at_first_failure": "block: the prefix stops at the first failed threshold, not the last passing one "
    "(vllm-ascend#11985)",
    "block_padding_read_as_draft": "block: a trailing -1 placeholder read as a drafted token (id 0): every sequence "
    "judged over G drafts, its accepted count cut to its own",
    "block_weight_unclipped": "block: the prefix weight w_i = w_{i-1} p(x) / q(x) not clipped at 1",
    "block_residual_with_own_weight": "block: the residual of position i taken with w_i instead of w_{i-1}",
    "block_threshold_denominator_padded": "block: each threshold h = rho / (rho + 1 - w + 1e-6), an epsilon that moves "
    "h by ~1e-6 of itself",
    "block_weight_ratio_padded": "block: the prefix weight divides by q(x) + 1e-10 (1e-5 of w where q(x) is 1e-5)",
    "block_correction_threshold_moved_at_large_vocab": "block: above 2^16 ids the last draw moves its threshold "
    "u * total up by 1e-6 of itself",
    "tree_sibling_mass_padded": "tree: after a rejected child the residual's mass is kept with 1e-6 added",
    "tree_without_replacement_mass_padded": "tree: without replacement, q divided by the mass left plus 1e-5",
    "tree_correction_threshold_moved_at_large_vocab": "tree: above 2^16 ids the last draw moves its threshold "
    "u * total up by 1e-6 of itself",
    "tree_residual_in_half": "tree: half-precision inputs keep the residual in their own precision between siblings",
    "tree_renormalised_naively": "tree: without replacement, q_i divided by 1 - q(tried ids), not by what is left",
    "tree_tried_shared_across_batch": "tree: without replacement, one set of tried ids for the whole batch",
    "tree_tried_kept_into_next_level": "tree: without replacement, the ids tried among a node's siblings stay "
    "excluded among its children",
    "tree_mass_not_reset": "tree: the residual mass left by a level's rejected siblings carried into the accepted "
    "child's level (its weights restart from the child's target row, its mass does not)",
    "drafting_q_from_latent_marginal": "text drafting: q is the drafter's latent marginal sum_z q(z) q(. | z)",
    "drafting_q_under_another_code": "text drafting: q and codes of a second proposal, the tokens of the first",
    "drafting_q_at_temperature_one": "text drafting: tokens drawn at temperature T, q reported at temperature 1",
    "drafting_target_keeps_a_rejected_draft": (
        "drafting loop: after a rejection the target's cache keeps the rejected draft's K/V for every later round"
    ),
    "drafting_loop_reuses_its_round_keys": (
        "drafting loop: the key never advances, every round's drafter and verify_chain draw with the first round's keys"
    ),
    "tree_loop_reuses_its_round_keys": (
        "tree loop: the key never advances, every round's draft and verify_tree draw with the first round's keys"
    ),
    "tree_loop_children_from_the_levels_first_row": (
        "tree loop, sampled modes: every node's children drawn from its level's first row, each node's own verified"
    ),
    "drafting_target_stale_after_rejection": (
        "text drafting: after a rejection the target's cache keeps one position too few (one token stale)"
    ),
    "drafting_drafter_cache_not_rolled_back": "text drafting: the drafter's cache keeps its drafts' entries",
    "concept_prefix_k_before_rotation": "source NCM: PC-1 caches prefix K after QK-norm, before the rotation",
    "concept_prefix_k_before_norm": "source NCM: PC-1 caches prefix K as projected, before QK-norm and rotation",
    "concept_prefix_rotated_from_zero": "source NCM: PC-1 rotates cached prefix keys from 0, whatever the start",
    "concept_prefix_kv_in_training_mode": "source NCM: PC-1 computes the prefix K/V in training mode (dropout active)",
    "concept_prefix_kv_in_half": "source NCM: PC-1 stores prefix K/V in float16; the uncached path runs float32",
    "concept_mask_leaks_next_level": "source NCM: the block-diagonal mask lets each level's rows see the next level",
    "concept_top_k_after_temperature_when_cached": (
        "source NCM: cached: temperature, then top-k keeping ties; uncached: top-k first"
    ),
    "concept_decoder_reads_previous_codebook": "source NCM: the decode reads level l with level l-1's codebook",
    "concept_cache_key_without_codec": "source NCM: PC-1's cross-request key omits the codec's fingerprint",
    # bugs only non-initial weights, wide inputs or a stressed cache show
    "concept_prefix_key_norm_without_gain": "source NCM: PC-1 normalises cached prefix keys without QK-norm's gain",
    "concept_prefix_embedding_without_bias": "source NCM: PC-1 projects the prefix without the projection's bias",
    "concept_prefix_rope_table_wraps": "source NCM: PC-1 rotates the prefix by positions wrapped modulo 4096",
    "concept_prefix_rows_chunked": "source NCM: PC-1's prefix K/V computed in chunks of 3 rows, joined last first",
    "concept_prefix_rope_in_model_dtype": "source NCM: PC-1's prefix rotary angles in the model's (half) dtype",
    "concept_cache_key_first_16_tokens": "source NCM: PC-1's cross-request key holds only the first 16 tokens",
    "concept_cache_eviction_serves_stale": (
        "source NCM cache: an evicted key still points at its slot; a same-length newcomer's K/V served for it"
    ),
    "tree_loop_mask_sees_siblings": "tree decoding: the tree mask lets a node attend to its earlier siblings",
    "tree_loop_positions_by_index": "tree decoding: nodes roped at the context length plus their index, not depth",
    "tree_loop_cache_keeps_rejected_branch": (
        "tree decoding: caches trimmed to the accepted length, not compacted to the path (a rejected branch kept)"
    ),
    "tree_loop_children_from_a_sharpened_q": (
        "tree loop: children drawn from each node's draft row squared and renormalised, verify_tree handed the row"
    ),
    "rollback_port_recurrent_state_not_restored": (
        "speculative loop over hybrid models: a rollback restores all but the recurrent state the drafts left"
    ),
    "rollback_port_ring_write_index_not_restored": (
        "speculative loop over hybrid models: a rollback restores each ring but its write index"
    ),
    "rollback_port_draft_not_rolled_back": (
        "speculative loop over hybrid models: the draft model's caches keep every rejected draft it ran"
    ),
    "rollback_port_draft_replays_one_token_short": (
        "speculative loop over hybrid models: the draft's rollback replays one accepted token too few"
    ),
}


EVIDENCE_MUTANTS = {
    "filtered_evidence": "correct where it answers, but turns every example of an even vocabulary away as filtered",
}
"""Planted bugs no assertion can catch (the properties pass vacuously): the verdict must refuse to call
their claims shown. Kept apart from `MUTANTS`, which must each fail some property."""
