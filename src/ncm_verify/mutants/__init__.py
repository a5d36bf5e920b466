"""Planted bugs: complete alternative implementations the suite must reject.

Each module here is an implementation under test (``--impl ncm_verify.mutants.NAME``)
that differs from the reference by one decision. `make test` runs the
properties against every one and fails unless each is caught.
"""

from __future__ import annotations

import dataclasses
from functools import partial

from ncm_verify.reference._kernels import chain
from ncm_verify.reference._kernels.block import BLOCK_RULES
from ncm_verify.reference._kernels.chain import REFERENCE_RULES, Rules
from ncm_verify.reference._kernels.factory import Kernels
from ncm_verify.reference._kernels.tree import TREE_RULES, Levels

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
    "draft_ids_16_bit": "the chain kernel reads draft ids as 16 bits: id 65 541 is read and kept as 5",
    "greedy_ties_to_the_last_maximum": "greedy verification breaks tied maxima toward the last index, not the first",
    "apply_chain_reuses_rejecting_uniform": "apply_chain alone draws the correction with the uniform that rejected",
    "verify_chain_swaps_uniform_rows": "verify_chain alone hands apply_chain its uniform rows swapped",
    "residual_floor_too_high": "treats a residual of mass below 1e-6 as zero and corrects from p",
    "apply_latent_chain_shares_the_latent_uniform": (
        "apply_latent_chain alone draws the latent and its tokens with one uniform"
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
    "tree_loop_mask_sees_siblings": "tree decoding: the tree mask lets a node attend to its earlier siblings",
    "tree_loop_positions_by_index": "tree decoding: nodes roped at the context length plus their index, not depth",
    "tree_loop_cache_keeps_rejected_branch": (
        "tree decoding: caches trimmed to the accepted length, not compacted to the path (a rejected branch kept)"
    ),
}


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
    """Files among the claims' swept before the rest (all are still swept): the likeliest catch, so the sweep, which
    stops at its first catch, runs less."""


EXACT_STEP = Catchers(("C5", "C6"), sweep=("properties/test_apply_exact.py",))
"""Sampling cannot see these: each passed every other kernel property of commit 215d406 (the suite before the exact
checks), so the sweep runs them against the exact step checks alone."""
TREE_WALK = Catchers(
    ("C13",),
    sweep=(
        "properties/test_tree.py::test_half_precision_walks_decide_as_their_float32_values",
        "properties/test_tree.py::test_a_batch_of_walks_decides_as_each_walk_alone",
        *(
            "properties/test_tree.py::test_walks_below_rejected_siblings_take_the_float64_walks_decisions_at_every_level"
            f"[{mode}]"
            for mode in ("without_replacement", "with_replacement", "top_k")
        ),
    ),
)
"""The walk's numerics and state (issue 28): the walk properties reach them on purpose, cheapest catch first (each
is caught by two of them); the enumeration and sampling cannot see them."""
CATCHERS: dict[str, Catchers] = {
    # a planted bug's name, else the longest prefix of it ending in "_", else "" (the kernels' own bugs)
    "": Catchers(
        ("C5", "C6", "C7", "C11"),
        # level drafting calls the reference's kernels; mlx-lm's loop is judged on its decoders, never --impl
        blind=("properties/test_level_drafting.py", "properties/test_mlx_lm_loop.py"),
    ),
    # the prefix properties, not the kernel ones; the cache judged against its stateful model first (at 9d2edab six
    # of the seven cache bugs passed the other twelve prefix properties first, ~7 s of CPU each)
    "cache_": Catchers(("C15",), first=("properties/test_prefix_cache_model.py",)),
    "level_": Catchers(("C6",), sweep=("properties/test_level_drafting.py",)),
    "tree_": Catchers(("C13",), sweep=("properties/test_tree.py", "properties/test_apply_exact.py")),
    "tree_loop_": Catchers(("C13",), sweep=("properties/test_tree_loop.py",)),  # the loop over mlx-lm (issue 28)
    "block_": Catchers(  # its exact step first (cheap), then the block's own properties
        ("C16",),
        sweep=(
            "properties/test_apply_exact.py::test_apply_block_takes_the_float64_steps_decisions_on_drawn_uniforms",
            "properties/test_block.py",
        ),
    ),
    "drafting_": Catchers(("C17",)),
    "concept_": Catchers(("C1", "C2", "C3", "C4", "C14")),  # the source's NCM (issue 23): its model-level claims
    **dict.fromkeys(
        (
            "ratio_in_half",
            "residual_swapped_when_small",
            "correction_cumsum_in_half",
            "draft_ids_16_bit",
            "apply_chain_reuses_rejecting_uniform",
            "verify_chain_swaps_uniform_rows",
            "residual_floor_too_high",
            "apply_latent_chain_shares_the_latent_uniform",
        ),
        EXACT_STEP,
    ),
    **dict.fromkeys(
        ("tree_residual_in_half", "tree_renormalised_naively", "tree_tried_shared_across_batch"), TREE_WALK
    ),
    # kernel bugs that the kernel files before their catching file never caught (the sweep of 24da459 ran them in
    # order and stopped at the first catch): that file alone saved 100-130 s of CPU each for the first two
    "greedy_ties_to_the_last_maximum": Catchers(("C7",), sweep=("properties/test_greedy.py",)),
    "u_zero_accepts": Catchers(("C5",), sweep=("properties/test_numerics.py",)),
    "nan_rows_pass_validation": Catchers(("C11",), sweep=("properties/test_bad_input.py",)),
}
"""Where the sweep looks for each planted bug's catch, stated once; the files come from the ledger
(`selftests/test_mutants.py`, `properties_for`)."""


def catchers_of(name: str) -> Catchers:
    """The `CATCHERS` row of planted bug `name`: its own, else its longest prefix's, else the kernels'."""
    if name not in MUTANTS:
        raise ValueError(f"name: {name!r} is not a planted bug")
    prefixes = [key for key in CATCHERS if key == name or (key.endswith("_") and name.startswith(key))]
    return CATCHERS[max(prefixes, key=lambda key: (key == name, len(key)), default="")]


EVIDENCE_MUTANTS = {
    "filtered_evidence": "correct where it answers, but turns every example of an even vocabulary away as filtered",
}
"""Planted bugs no assertion can catch (the properties pass vacuously): the verdict must refuse to call
their claims shown. Kept apart from `MUTANTS`, which must each fail some property."""


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
