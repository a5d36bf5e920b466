"""`Kernels`: every kernel of the protocol built from a set of step rules, its compiled steps cached per instance."""

from __future__ import annotations

import functools
from collections.abc import Callable

import mlx.core as mx
import numpy as np

from ncm_verify.reference._kernels import block, chain, fused, tree
from ncm_verify.reference._kernels.arrays import all_drafts
from ncm_verify.reference._kernels.checks import (
    check_chain_inputs_stepwise,
    check_factorized_inputs_stepwise,
    check_greedy_inputs_stepwise,
    check_latent_chain_inputs,
    per_sequence_keys,
)
from ncm_verify.reference._kernels.compiled import compile_step, run_checked, run_step, step_keys
from ncm_verify.reference._kernels.sampling import first_argmax
from ncm_verify.reference._kernels.tree_inputs import check_tree_inputs, tree_guard, tree_types, tree_values_valid

GREEDY_STEP = mx.compile(chain.apply_greedy)
"""The greedy step unvalidated, compiled once (eager, its small ops cost 10% more at B = 1)."""

CHECKS: dict[str, tuple[Callable, Callable]] = {
    "chain": (fused.chain_values_valid, fused.chain_guard),
    "block": (fused.chain_values_valid, fused.chain_guard),
    "factorized": (fused.factorized_values_valid, fused.factorized_guard),
    "latent": (fused.latent_values_valid, fused.latent_guard),
    "greedy": (fused.greedy_values_valid, fused.greedy_guard),
}
"""Each family's value checks (a lazy flag) and guard, fused into its compiled step (`compile_step`)."""


def validated(prepare: Callable[[], tuple], stepwise: Callable[[], object], unchecked: Callable[[], tuple]) -> tuple:
    """A validated call: `prepare()` checks types, shapes and key on the host and returns the checked step and its
    arguments; the values are checked inside the step, in the one host sync that evaluates it.

    A problem `prepare` finds goes through `stepwise` first, so that the first bad argument in order is named.
    """
    try:
        step, arguments = prepare()
    except ValueError:
        stepwise()
        raise
    return run_checked(step, arguments, stepwise, unchecked)


class Kernels:
    """The protocol's kernels (chain, greedy, factorised, latent chain, tree, block) built from step rules.

    Each ``verify_*``/``apply_*``/``draw_uniforms`` has exactly the protocol's signature. The public face
    (`REFERENCE_KERNELS`) is built from the reference's rules; a planted bug swaps one rule or step.

    Args:
        rules: the chain's decisions (`chain.Rules`), shared by the chain, factorised and latent-chain kernels.
        argmax: greedy's argmax. Only the reference's is compiled: a planted one runs eager, as it always has.
        tree_rules: the tree walk's decisions (`tree.TreeRules`); `levels`: how each level of the walk starts.
        block_rules: block verification's decisions (`block.BlockRules`).
        chain_step, latent_step: the chain and latent-chain steps given uniforms, ``(*arrays, uniforms, *, rules)``.
        tree_step: a walk replacing the reference's, ``(*arrays, uniforms, *, mode, rules)``; it is compiled for
            any tree, the reference's for the later siblings each batch has.
    """

    def __init__(
        self,
        rules: chain.Rules = chain.REFERENCE_RULES,
        *,
        argmax: Callable = first_argmax,
        tree_rules: tree.TreeRules = tree.TREE_RULES,
        levels: tree.Levels = tree.FRESH_LEVELS,
        block_rules: block.BlockRules = block.BLOCK_RULES,
        chain_step: Callable = chain.apply_chain,
        latent_step: Callable = chain.apply_latent_chain,
        tree_step: Callable | None = None,
    ):
        self.rules, self.tree_rules, self.levels, self.block_rules = rules, tree_rules, levels, block_rules
        self._argmax, self._chain_step, self._latent_step, self._tree_step = argmax, chain_step, latent_step, tree_step
        self._greedy_step = (
            GREEDY_STEP if argmax is first_argmax else functools.partial(chain.apply_greedy, argmax=argmax)
        )
        # A walk that may carry state from the level above works through every node: no count of later siblings.
        self._counts_later = tree_step is None and levels.fresh
        self._compiled = functools.lru_cache(maxsize=64)(self._compile)

    def _compile(
        self, family: str, columns: int, mode: str = "", later: int | None = None, checked: bool = False
    ) -> Callable:
        """`family`'s step given uniforms, compiled with its uniforms drawn inside (and, when `checked`, its input's
        value checks fused in); once per (family, columns, mode, later, checked) in this instance's cache."""
        checks: tuple[Callable, Callable] | None = None
        if family == "tree":
            checks = (functools.partial(tree_values_valid, mode=mode), tree_guard) if checked else None
            return compile_step(self._walk(mode, later), self.tree_rules.uniforms, columns, checks)
        checks = CHECKS[family] if checked else None
        if family == "greedy":
            return compile_step(self.apply_greedy, None, columns, checks)
        if family == "block":
            return compile_step(self.apply_block, self.block_rules.uniforms, columns, checks)
        apply: dict[str, Callable] = {
            "chain": self.apply_chain,
            "factorized": self.apply_factorized,
            "latent": self.apply_latent_chain,
        }
        return compile_step(apply[family], self.rules.uniforms, columns, checks)

    def _verify_rows(self, family: str, target_probs, draft_probs, draft_tokens, num_draft, key, validate: bool):
        """The chain or block step with `num_draft`, validated when `validate`."""
        arrays = (target_probs, draft_probs, draft_tokens)
        if not validate:
            lengths = all_drafts(target_probs.shape[0], draft_tokens.shape[1]) if num_draft is None else num_draft
            return run_step(self._compiled(family, draft_tokens.shape[1] + 1), (*arrays, lengths), key)

        def stepwise() -> mx.array:
            return check_chain_inputs_stepwise(target_probs, draft_probs, draft_tokens, num_draft)

        def prepare() -> tuple:
            lengths = fused.chain_types(target_probs, draft_probs, draft_tokens, num_draft)
            return self._compiled(family, draft_tokens.shape[1] + 1, checked=True), (
                *arrays,
                lengths,
                *step_keys(arrays, key),
            )

        def unchecked() -> tuple:
            return run_step(self._compiled(family, draft_tokens.shape[1] + 1), (*arrays, stepwise()), key)

        return validated(prepare, stepwise, unchecked)

    # --- the speculative kernels ---------------------------------------------------------------

    def draw_uniforms(self, key, batch: int, shape: tuple[int, ...]) -> mx.array:
        """The uniforms ``[B, *shape]`` a ``verify_*`` call with `key` hands its ``apply_*``."""
        return self.rules.uniforms(per_sequence_keys(key, batch), shape)

    def apply_chain(self, target_probs, draft_probs, draft_tokens, num_draft, uniforms) -> chain.ChainOutcome:
        return self._chain_step(target_probs, draft_probs, draft_tokens, num_draft, uniforms, rules=self.rules)

    def apply_greedy(self, target, draft_tokens, num_draft) -> chain.ChainOutcome:
        return chain.apply_greedy(target, draft_tokens, num_draft, argmax=self._argmax)

    def apply_factorized(self, target_probs, draft_probs, draft_tokens, uniforms) -> chain.FactorizedOutcome:
        return chain.apply_factorized(target_probs, draft_probs, draft_tokens, uniforms, rules=self.rules)

    def apply_latent_chain(
        self,
        target_latent_probs,
        draft_latent_probs,
        draft_latent,
        target_token_probs,
        draft_token_probs,
        draft_tokens,
        uniforms,
    ) -> chain.LatentChainOutcome:
        return self._latent_step(
            target_latent_probs,
            draft_latent_probs,
            draft_latent,
            target_token_probs,
            draft_token_probs,
            draft_tokens,
            uniforms,
            rules=self.rules,
        )

    def verify_chain(
        self, target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate: bool = True
    ) -> chain.ChainOutcome:
        outcome = self._verify_rows("chain", target_probs, draft_probs, draft_tokens, num_draft, key, validate)
        return chain.ChainOutcome(*outcome)

    def verify_greedy(self, target, draft_tokens, *, num_draft=None, validate: bool = True) -> chain.ChainOutcome:
        if not validate:
            if num_draft is None:
                num_draft = all_drafts(target.shape[0], draft_tokens.shape[1])
            return chain.ChainOutcome(*self._greedy_step(target, draft_tokens, num_draft))

        def stepwise() -> mx.array:
            return check_greedy_inputs_stepwise(target, draft_tokens, num_draft)

        if self._argmax is not first_argmax:  # a planted argmax runs eager, after the stepwise checks
            return chain.ChainOutcome(*self._greedy_step(target, draft_tokens, stepwise()))

        def prepare() -> tuple:
            lengths = fused.greedy_types(target, draft_tokens, num_draft)
            return self._compiled("greedy", draft_tokens.shape[1] + 1, checked=True), (target, draft_tokens, lengths)

        def unchecked() -> tuple:
            return tuple(self._greedy_step(target, draft_tokens, stepwise()))

        return chain.ChainOutcome(*validated(prepare, stepwise, unchecked))

    def verify_factorized(
        self, target_probs, draft_probs, draft_tokens, *, key, validate: bool = True
    ) -> chain.FactorizedOutcome:
        arrays = (target_probs, draft_probs, draft_tokens)
        if not validate:
            return chain.FactorizedOutcome(*run_step(self._compiled("factorized", target_probs.shape[1]), arrays, key))

        def prepare() -> tuple:
            fused.factorized_types(*arrays)
            return self._compiled("factorized", target_probs.shape[1], checked=True), (*arrays, *step_keys(arrays, key))

        def stepwise() -> None:
            check_factorized_inputs_stepwise(*arrays)

        def unchecked() -> tuple:
            return run_step(self._compiled("factorized", target_probs.shape[1]), arrays, key)

        return chain.FactorizedOutcome(*validated(prepare, stepwise, unchecked))

    def verify_latent_chain(
        self,
        target_latent_probs,
        draft_latent_probs,
        draft_latent,
        target_token_probs,
        draft_token_probs,
        draft_tokens,
        *,
        key,
        validate: bool = True,
    ) -> chain.LatentChainOutcome:
        inputs = (
            target_latent_probs,
            draft_latent_probs,
            draft_latent,
            target_token_probs,
            draft_token_probs,
            draft_tokens,
        )
        if not validate:
            return chain.LatentChainOutcome(*run_step(self._compiled("latent", draft_tokens.shape[1] + 1), inputs, key))

        def prepare() -> tuple:
            fused.latent_types(*inputs)
            return self._compiled("latent", draft_tokens.shape[1] + 1, checked=True), (*inputs, *step_keys(inputs, key))

        def unchecked() -> tuple:
            return run_step(self._compiled("latent", draft_tokens.shape[1] + 1), inputs, key)

        return chain.LatentChainOutcome(*validated(prepare, lambda: check_latent_chain_inputs(*inputs), unchecked))

    # --- tree and block verification -------------------------------------------------------------

    def _walk(self, mode: str, later: int | None) -> Callable:
        """The tree walk with `mode` and the rules bound, given `later` later siblings (None: any tree)."""
        if self._tree_step is not None:
            return functools.partial(self._tree_step, mode=mode, rules=self.tree_rules)
        return functools.partial(tree.walk, mode=mode, rules=self.tree_rules, later=later, levels=self.levels)

    def apply_tree(
        self, target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, *, mode: str = "with_replacement"
    ) -> tree.TreeOutcome:
        tree.check_mode(mode)
        return self._walk(mode, None)(target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms)

    def verify_tree(
        self,
        target_probs,
        draft_probs,
        tree_tokens,
        parents,
        *,
        key,
        num_nodes=None,
        mode: str = "with_replacement",
        validate: bool = True,
    ) -> tree.TreeOutcome:
        arrays = (target_probs, draft_probs, tree_tokens, parents)
        if not validate:
            tree.check_mode(mode)
            if num_nodes is None:
                num_nodes = all_drafts(target_probs.shape[0], tree_tokens.shape[1])
            step = self._compiled("tree", tree_tokens.shape[1] + 1, mode, None)
            return tree.TreeOutcome(*run_step(step, (*arrays, num_nodes), key))

        def stepwise() -> mx.array:
            return check_tree_inputs(*arrays, num_nodes, mode)

        def prepare() -> tuple:
            counts = tree_types(*arrays, num_nodes, mode)
            later = None
            if self._counts_later:
                # Read on the host (inputs, already evaluated): the walk works through as many later siblings as
                # this batch has; unchecked values only size the walk, which the fused flag then refuses.
                ids = parents if parents.dtype == mx.int32 else parents.astype(mx.int32)  # no op to run for int32
                later = tree.later_siblings(np.array(self.tree_rules.parents(ids)), np.array(counts))
            step = self._compiled("tree", tree_tokens.shape[1] + 1, mode, later, checked=True)
            return step, (*arrays, counts, *step_keys(arrays, key))

        def unchecked() -> tuple:
            step = self._compiled("tree", tree_tokens.shape[1] + 1, mode, None)
            return run_step(step, (*arrays, stepwise()), key)

        return tree.TreeOutcome(*validated(prepare, stepwise, unchecked))

    def apply_block(self, target_probs, draft_probs, draft_tokens, num_draft, uniforms) -> chain.ChainOutcome:
        return block.apply_block(target_probs, draft_probs, draft_tokens, num_draft, uniforms, rules=self.block_rules)

    def verify_block(
        self, target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate: bool = True
    ) -> chain.ChainOutcome:
        # The chain's validation, fused into the block's compiled step.
        outcome = self._verify_rows("block", target_probs, draft_probs, draft_tokens, num_draft, key, validate)
        return chain.ChainOutcome(*outcome)


REFERENCE_KERNELS = Kernels()
"""The reference: what the public face (`speculative`, `tree`, `block`) calls."""
