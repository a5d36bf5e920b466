"""Planted bugs: complete alternative implementations the suite must reject.

Each module here is an implementation under test (``--impl ncm_verify.mutants.NAME``)
that differs from the reference by one decision. `make test` runs the
properties against every one and fails unless each is caught.
"""

from __future__ import annotations

import dataclasses
from functools import partial

from ncm_verify.planted import EVIDENCE_MUTANTS, MUTANTS
from ncm_verify.reference._kernels import chain
from ncm_verify.reference._kernels.block import BLOCK_RULES
from ncm_verify.reference._kernels.chain import REFERENCE_RULES, Rules
from ncm_verify.reference._kernels.factory import Kernels
from ncm_verify.reference._kernels.tree import TREE_RULES, Levels


@dataclasses.dataclass(frozen=True)
class Catchers:
    """The properties that can catch a kind of planted bug: those the ledger lists for the claims it breaks."""

    claims: tuple[str, ...]
    """Ledger claims the planted bug breaks; the property files they list are swept against it, in sorted order."""
    sweep: tuple[str, ...] = ()
    """Property files or node ids among those, cheapest catch first, where the sweep runs fewer than all."""
    blind: tuple[str, ...] = ()
    """Files among the claims' that cannot see the bug: they drive entry points other than those it replaces."""
    first: tuple[str, ...] = ()
    """Files, properties or nodes among the claims' swept before the rest (all are still swept; `--ncm-first`): the
    likeliest catch, so the sweep, which stops at its first catch, runs less."""

    def catching_first(self, *named: str) -> Catchers:
        """This row with `named` swept first: a bug whose catch sits behind properties it passes."""
        return dataclasses.replace(self, first=named)


EXACT_STEP = Catchers(("C5", "C6"), sweep=("properties/test_apply_exact.py",))
"""Sampling cannot see these: each passed every other kernel property of commit 215d406 (the suite before the exact
checks), so the sweep runs them against the exact step checks alone."""
TREE_WALKS = (
    "properties/test_tree.py::test_walks_below_rejected_siblings_take_the_float64_walks_decisions_at_every_level"
)
TREE_SIBLINGS = (
    "properties/test_tree.py::test_each_sibling_is_judged_by_the_residual_the_earlier_ones_left_and_its_own_q"
)
TREE_WALK = Catchers(
    ("C13",),
    sweep=(
        "properties/test_tree.py::test_half_precision_walks_decide_as_their_float32_values",
        "properties/test_tree.py::test_a_batch_of_walks_decides_as_each_walk_alone",
        *(f"{TREE_WALKS}[{mode}]" for mode in ("without_replacement", "with_replacement", "top_k")),
    ),
)
"""The tree walk's numerics and state: the walk properties reach them on purpose, cheapest catch first (each
is caught by two of them); the enumeration and sampling cannot see them."""
TREE_FILES = Catchers(("C13",), sweep=("properties/test_tree.py", "properties/test_apply_exact.py"))
KERNELS = Catchers(
    ("C5", "C6", "C7", "C11"),
    # level drafting calls the reference's kernels; mlx-lm's loop is judged on its decoders, never --impl
    blind=("properties/test_level_drafting.py", "properties/test_mlx_lm_loop.py"),
)
LEVELS = Catchers(("C6",), sweep=("properties/test_level_drafting.py",))
BLOCKS = Catchers(  # its exact step first (cheap), then the block's own properties
    ("C16",),
    sweep=(
        "properties/test_apply_exact.py::test_apply_block_takes_the_float64_steps_decisions_on_drawn_uniforms",
        "properties/test_block.py",
    ),
)
CONCEPT = Catchers(("C1", "C2", "C3", "C4", "C14"))  # the source's NCM: its model-level claims


def walks(mode: str) -> str:
    return f"{TREE_WALKS}[{mode}]"


def siblings(mode: str) -> str:
    return f"{TREE_SIBLINGS}[{mode}]"


def verify_equals_apply(kind: str) -> str:
    return f"properties/test_apply_exact.py::test_verify_equals_apply_on_the_uniforms_it_draws[{kind}]"


EXACTLY_SUMMED = (
    "properties/test_apply_exact.py::"
    "test_apply_steps_draw_to_two_ulps_of_the_float64_boundaries_of_exactly_summed_rows_at_V_128256"
)
EXACT_BLOCK_ROWS = (
    "properties/test_apply_exact.py::"
    "test_apply_block_takes_the_float64_thresholds_to_two_ulps_on_rows_exact_in_float32_at_V_128256"
)
EXACT_TREE_ROWS = (
    "properties/test_apply_exact.py::"
    "test_apply_tree_takes_the_float64_sibling_decisions_to_two_ulps_on_rows_exact_in_float32_at_V_128256"
)
HALF_STEPS = (
    "properties/test_apply_exact.py::"
    "test_half_precision_steps_take_the_float64_decisions_just_below_and_above_every_boundary"
)
LOOP_ENUMERATED = (
    "properties/test_text_drafting.py::"
    "test_the_implementations_drafting_loop_enumerates_to_the_target_law_over_two_rounds"
)
CHAIN_AS_TREE = "properties/test_tree.py::test_a_chain_is_verified_as_verify_chain_verifies_it"
LEVEL_LAW_SAMPLED = (
    "properties/test_level_drafting.py::test_level_drafting_samples_the_target_law_of_latents_and_tokens"
)
BLOCK_LAW_SAMPLED = (
    "properties/test_block.py::test_block_accepted_counts_and_emitted_tokens_follow_their_exact_joint_law"
)
CACHED_PREFIX_KV = (
    "properties/test_concept_model.py::test_level_logits_from_the_cached_prefix_kv_equal_the_recomputed_ones[drawn]"
)
CONCEPT_CACHE_MODEL = "properties/test_concept_cache_model.py"
"""The concept cache against its stateful model: small budgets, mixed batches, reloads."""
CATCHERS: dict[str, Catchers] = {
    # a planted bug's name, else the longest prefix of it ending in "_", else "" (the kernels' own bugs)
    "": KERNELS,
    # the prefix properties, not the kernel ones; the cache judged against its stateful model first (at 9d2edab six
    # of the seven cache bugs passed the other twelve prefix properties first, ~7 s of CPU each)
    "cache_": Catchers(("C15",), first=("properties/test_prefix_cache_model.py",)),
    "level_": LEVELS,
    "tree_": TREE_FILES,
    "tree_loop_": Catchers(("C13",), sweep=("properties/test_tree_loop.py",)),  # the tree-decoding loop over mlx-lm
    # the speculative loop's rollback over hybrid models: the caches, read after every round, show each first
    "rollback_port_": Catchers(("C18",)).catching_first(
        "properties/test_rollback.py::"
        "test_after_every_speculative_round_each_layer_as_attended_equals_the_cache_rebuilt_from_the_accepted_tokens"
    ),
    "block_": BLOCKS,
    "drafting_": Catchers(("C17",)),
    "concept_": CONCEPT,
    **dict.fromkeys(
        (
            "ratio_in_half",
            "residual_swapped_when_small",
            "correction_cumsum_in_half",
            "draft_ids_16_bit",
            "apply_chain_reuses_rejecting_uniform",
            "residual_floor_too_high",
            "apply_latent_chain_shares_the_latent_uniform",
        ),
        EXACT_STEP,
    ),
    "tree_residual_in_half": TREE_WALK,
    # within the any-order slack of a large vocabulary: only rows exact in float32 show them
    **dict.fromkeys(
        (
            "block_threshold_denominator_padded",
            "block_weight_ratio_padded",
            "block_correction_threshold_moved_at_large_vocab",
        ),
        Catchers(("C16",), sweep=(EXACT_BLOCK_ROWS, *BLOCKS.sweep)),
    ),
    **dict.fromkeys(
        ("tree_sibling_mass_padded", "tree_correction_threshold_moved_at_large_vocab"),
        TREE_FILES.catching_first(EXACT_TREE_ROWS),
    ),
    "tree_without_replacement_mass_padded": TREE_FILES.catching_first(f"{EXACT_TREE_ROWS}[without_replacement]"),
    "correction_threshold_moved_at_large_vocab": EXACT_STEP.catching_first(EXACTLY_SUMMED),
    "correction_cdf_in_bfloat16_for_half_inputs": EXACT_STEP.catching_first(f"{HALF_STEPS}[chain]"),
    "block_weight_in_half_for_half_inputs": Catchers(("C16",), sweep=(f"{HALF_STEPS}[block]", *BLOCKS.sweep)),
    "drafting_target_keeps_a_rejected_draft": Catchers(("C17",)).catching_first(LOOP_ENUMERATED),
    # only SmolLM2's real rows (a peaked residual at V = 49 152) show a one-pass sum's error
    "residual_summed_in_one_pass": EXACT_STEP.catching_first(
        "properties/test_apply_exact.py::test_residual_distribution_equals_the_float64_residual_of_the_same_rounded_rows"
    ),
    # kernel bugs that the kernel files before their catching file never caught (the sweep of 24da459 ran them in
    # order and stopped at the first catch): that file alone saved 100-130 s of CPU each for the first two
    "greedy_ties_to_the_last_maximum": Catchers(("C7",), sweep=("properties/test_greedy.py",)),
    "nan_rows_pass_validation": Catchers(("C11",), sweep=("properties/test_bad_input.py",)),
    # bugs whose catch the sweep of ab177f3 met only after properties they pass (3-24 of them, 2.5-11 s of CPU
    # each): that catch first; every other property is still swept after it
    "shared_uniform": KERNELS.catching_first(verify_equals_apply("tree")),
    "verify_chain_swaps_uniform_rows": Catchers(  # verify==apply is a C11 (protocol) property
        ("C5", "C6", "C11"), sweep=EXACT_STEP.sweep
    ).catching_first(verify_equals_apply("chain")),
    "u_zero_accepts": Catchers(("C5", "C11"), sweep=("properties/test_numerics.py",)).catching_first(
        "properties/test_numerics.py::test_acceptance_follows_u_times_q_below_p_at_every_uniform[above 65 536]"
    ),
    **dict.fromkeys(
        ("level_corrected_tokens_not_redrawn", "level_tokens_under_other_latent"),
        LEVELS.catching_first(LEVEL_LAW_SAMPLED),
    ),
    "level_rejected_kv_kept": LEVELS.catching_first(
        "properties/test_level_drafting.py::test_cached_and_uncached_level_drafting_emit_the_same_levels"
    ),
    "tree_mass_not_reset": TREE_FILES.catching_first(walks("with_replacement")),
    "tree_tried_kept_into_next_level": TREE_FILES.catching_first(walks("without_replacement")),
    "tree_renormalised_naively": TREE_WALK.catching_first(walks("without_replacement")),
    "tree_tried_shared_across_batch": TREE_WALK.catching_first(
        "properties/test_tree.py::test_a_batch_of_walks_decides_as_each_walk_alone"
    ),
    **dict.fromkeys(("tree_bonus_from_residual", "tree_parent_off_by_one"), TREE_FILES.catching_first(CHAIN_AS_TREE)),
    "tree_top_k_as_sampled": TREE_FILES.catching_first(siblings("top_k")),
    "tree_without_replacement_unrenormalised": TREE_FILES.catching_first(siblings("without_replacement")),
    **dict.fromkeys(
        ("tree_no_residual_update", "tree_correction_from_target"),
        TREE_FILES.catching_first(siblings("with_replacement")),
    ),
    **dict.fromkeys(
        (
            "block_stops_at_first_failure",
            "block_tokenwise_acceptance",
            "block_tokenwise_residual",
            "block_weight_unclipped",
            "block_padding_read_as_draft",
            "block_residual_with_own_weight",
        ),
        BLOCKS.catching_first(BLOCK_LAW_SAMPLED),
    ),
    "concept_top_k_after_temperature_when_cached": CONCEPT.catching_first(
        "properties/test_concept_model.py::test_cached_generation_equals_uncached_generation_cold_and_warm[checkpoint]",
        CONCEPT_CACHE_MODEL,  # since path (b) draws the trained checkpoint too (no tied codes), the likelier catch
    ),
    "concept_cache_key_without_codec": CONCEPT.catching_first(
        "properties/test_concept_model.py::test_the_cache_serves_an_entry_only_on_its_exact_key_over_a_run_of_requests"
    ),
    **dict.fromkeys(
        (
            "concept_prefix_rotated_from_zero",
            "concept_prefix_k_before_rotation",
            "concept_prefix_kv_in_training_mode",
            "concept_prefix_kv_in_half",
            "concept_prefix_k_before_norm",
            # seen only away from initialisation, past 4096 positions, past 3 rows or in half precision
            "concept_prefix_key_norm_without_gain",
            "concept_prefix_embedding_without_bias",
            "concept_prefix_rope_table_wraps",
            "concept_prefix_rows_chunked",
            "concept_prefix_rope_in_model_dtype",
        ),
        CONCEPT.catching_first(CACHED_PREFIX_KV),
    ),
    "concept_cache_key_first_16_tokens": CONCEPT.catching_first(
        "properties/test_concept_model.py::"
        "test_the_cache_misses_every_head_and_extension_of_a_stored_prefix_and_heads_states_differ"
    ),
    "concept_cache_eviction_serves_stale": CONCEPT.catching_first(CONCEPT_CACHE_MODEL),
}
"""Where the sweep looks for each planted bug's catch, stated once; the files come from the ledger
(`selftests/test_mutants.py`, `properties_for`)."""


def catchers_of(name: str) -> Catchers:
    """The `CATCHERS` row of planted bug `name`: its own, else its longest prefix's, else the kernels'."""
    if name not in MUTANTS:
        raise ValueError(f"name: {name!r} is not a planted bug")
    prefixes = [key for key in CATCHERS if key == name or (key.endswith("_") and name.startswith(key))]
    return CATCHERS[max(prefixes, key=lambda key: (key == name, len(key)), default="")]


CHAIN_NAMES = (
    "apply_chain",
    "apply_factorized",
    "apply_latent_chain",
    "verify_chain",
    "verify_factorized",
    "verify_latent_chain",
    "draw_uniforms",
)
"""What a planted chain rule or step replaces: every kernel that reads the chain's rules (greedy reads none)."""


def names_of(kernels: Kernels, names: tuple[str, ...]) -> dict:
    """`names` of `kernels`, for a planted module's ``globals()``."""
    return {name: getattr(kernels, name) for name in names}


def make_implementation(rules: Rules = REFERENCE_RULES, *, chain_inputs=None, apply_latent_chain=None) -> dict:
    """The protocol's chain kernels with `rules`, chain inputs rewritten by `chain_inputs`, the latent-chain
    step replaced by `apply_latent_chain` (``(*arrays, uniforms, *, rules)``)."""

    def chain_step(*arrays, rules):
        return chain.apply_chain(*(arrays if chain_inputs is None else chain_inputs(*arrays)), rules=rules)

    kernels = Kernels(rules, chain_step=chain_step, latent_step=apply_latent_chain or chain.apply_latent_chain)
    return names_of(kernels, CHAIN_NAMES)


def with_rule(**changes) -> dict:
    """The reference with one of its rules swapped."""
    return make_implementation(REFERENCE_RULES._replace(**changes))


def with_tree_rule(**changes) -> dict:
    """The reference tree verifier with one of its decisions (`TreeRules`) swapped."""
    return names_of(Kernels(tree_rules=TREE_RULES._replace(**changes)), ("apply_tree", "verify_tree"))


def with_tree_levels(start) -> dict:
    """The reference tree verifier with how a level starts (`Levels.start`) swapped: every node worked
    through on full rows, as the start may carry state from the level above."""
    return names_of(Kernels(levels=Levels(start=start, fresh=False)), ("apply_tree", "verify_tree"))


def with_block_rule(**changes) -> dict:
    """The reference block verifier with one of its decisions (`BlockRules`) swapped."""
    return names_of(Kernels(block_rules=BLOCK_RULES._replace(**changes)), ("apply_block", "verify_block"))


def make_prefix_cache(rewrite_key) -> type:
    """The reference `PrefixCache` whose keys pass through `rewrite_key(key) -> key`."""
    from ncm_verify.reference.ncm import PrefixCache

    class RewrittenKeyCache(PrefixCache):
        def keys_for(self, model, prefixes, namespace=""):
            return [rewrite_key(key) for key in super().keys_for(model, prefixes, namespace)]

    return RewrittenKeyCache


def with_level_step(**changes) -> dict:
    """Level drafting on the model with one of its decisions (`level_draft.Steps`) swapped."""
    from ncm_verify.reference.ncm.level_draft import REFERENCE_STEPS, generate_level_speculative

    return {
        "generate_level_speculative": partial(generate_level_speculative, steps=REFERENCE_STEPS._replace(**changes))
    }


def with_drafting_step(**changes) -> dict:
    """The text drafting loop with one of its decisions (`drafting.loop.Steps`) swapped."""
    from ncm_verify.reference.drafting.loop import REFERENCE_STEPS, generate_drafted

    return {"generate_drafted": partial(generate_drafted, _steps=REFERENCE_STEPS._replace(**changes))}


def with_concept_seams(**changes) -> dict:
    """The source's NCM with one private decision (`concept_model._Seams`) changed, on drawn and loaded models."""
    from ncm_verify.reference.ncm import concept_model

    seams = concept_model._Seams(**changes)
    return {
        "make_concept_model": partial(concept_model.make_concept_model, _seams=seams),
        "load_concept_model": partial(concept_model.load_concept_model, _seams=seams),
    }


def with_tree_loop_step(**changes) -> dict:
    """The tree-decoding loop with one of its decisions (`drafting.tree_loop.TreeSteps`) swapped."""
    from ncm_verify.reference.drafting.tree_loop import REFERENCE_TREE_STEPS, generate_tree_drafted

    return {"generate_tree_drafted": partial(generate_tree_drafted, _steps=REFERENCE_TREE_STEPS._replace(**changes))}


def with_rollback_step(**changes) -> dict:
    """The speculative loop over mlx-lm models with one rollback decision (`speculative_step.RollbackSteps`)
    swapped."""
    from ncm_verify.reference.drafting.speculative_step import REFERENCE_ROLLBACK_STEPS, speculative_generate_step

    steps = REFERENCE_ROLLBACK_STEPS._replace(**changes)
    return {"speculative_generate_step": partial(speculative_generate_step, _steps=steps)}


def recurrent_layers(caches) -> list:
    """The `ArraysCache`s (recurrent layers' state) of mlx-lm `caches`, inside a `CacheList` (falcon_h1) too."""
    from mlx_lm.models.cache import ArraysCache, CacheList

    return [
        c
        for cache in caches
        for c in (cache.caches if isinstance(cache, CacheList) else [cache])
        if isinstance(c, ArraysCache)
    ]
