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
