"""What the harness knows about one kernel, written once: `KernelSpec` and its two kinds.

A spec names the kernel's entry points and arguments (in call order, with their roles),
the shape of its uniforms and outcome, how to build valid inputs from a fixture or from
drawn rows, and its float64 oracle. Drivers, strategies and properties read specs; none
branches on a kernel's name. The registry of specs is :mod:`ncm_verify.harness.kernels`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

ROLES = ("probs", "scores", "ids", "nodes", "lengths", "key", "option")
"""What an argument holds: probability rows, score (logit) rows, ids, node indices within the same draft
(a tree's parents), per-sequence draft lengths, a key, or a keyword option taking one of a few values."""
KEYWORD_ROLES = ("lengths", "key", "option")
"""Roles passed by keyword to ``verify_*``; a case holds the other arguments in order."""


@dataclasses.dataclass(frozen=True)
class Argument:
    """One argument of a kernel's ``verify_*`` entry point."""

    name: str
    role: str = "probs"
    over: str = "tokens"
    """What the last axis of a row (or an id) indexes: ``tokens``, or ``latents`` (codebook entries)."""
    partners: tuple[str, ...] = ()
    """Arguments whose shape this one is checked against, beyond the first argument (a mismatch may name them)."""
    values: tuple = ()
    """The values an option may take (every one is drawn)."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role: {self.role!r} is not one of {ROLES}")
        if (self.role == "option") != bool(self.values):
            raise ValueError(f"values: {self.name} is an option exactly when it lists the values it takes")


class Fixtures(Protocol):
    def __call__(self, *, drafting: bool) -> Any:
        """A strategy of the fixtures the kernel's cases are built from (with `drafting`, some draft is drafted)."""


class CaseView(Protocol):
    def __call__(self, case: Any, outcome: Any, /) -> Any:
        """An array read from a case (`ncm_verify.harness.drivers.KernelCase`) and the outcome of its call."""


class AcceptanceView(Protocol):
    def __call__(self, case: Any, outcome: Any, /) -> tuple[Any, Any, Any, Any]:
        """``(p(x), q(x), judged, accepted)`` per draft of a case's outcome."""


class WellFormed(Protocol):
    def __call__(self, case: Any, outcome: Any, /) -> None:
        """Raises AssertionError, saying what is wrong, on an outcome no valid step gives."""


@dataclasses.dataclass(frozen=True, repr=False)
class KernelSpec:
    """What every kernel of the protocol gives, as the harness drives and judges it.

    ``arguments`` are ``verify_*``'s in call order; the ``lengths`` and ``key`` arguments are
    keywords there, and ``apply_*`` takes the lengths positionally before its uniforms. A kernel with
    cases and a step of its own is a `SteppedKernel`; one that borrows another's cases a `BorrowingKernel`.
    """

    name: str
    arguments: tuple[Argument, ...]
    verify: str
    """The entry point's name in an implementation module."""
    bonus_row: bool = False
    """The target holds one row past the drafted positions, for the bonus token."""
    least_read: Callable[[int], tuple[int, int]] = lambda drafts: (0, 0)
    """For the bench's floors: the whole vocabulary rows and the single entries per sequence the step must read
    at least, given G drafts (or positions)."""

    def __repr__(self) -> str:
        """How Hypothesis prints a case's kernel: the registry entry that rebuilds it."""
        return f"KERNEL_SPECS[{self.name!r}]"

    def __post_init__(self) -> None:
        names = [argument.name for argument in self.arguments]
        if len(set(names)) != len(names):
            raise ValueError(f"arguments: {self.name} names an argument twice: {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(argument.name for argument in self.arguments)

    def argument(self, name: str) -> Argument:
        return next(argument for argument in self.arguments if argument.name == name)

    @property
    def positional(self) -> tuple[Argument, ...]:
        """The arguments a case holds in order (every one but the keywords: lengths, key, options)."""
        return tuple(a for a in self.arguments if a.role not in KEYWORD_ROLES)

    @property
    def options(self) -> tuple[Argument, ...]:
        """Keyword options a case fixes (a tree's child-drawing mode)."""
        return tuple(a for a in self.arguments if a.role == "option")

    @property
    def lengths(self) -> Argument | None:
        """The per-sequence draft lengths argument, if the kernel takes one."""
        return next((a for a in self.arguments if a.role == "lengths"), None)

    @property
    def samples(self) -> bool:
        """Whether the kernel draws (takes a key) rather than deciding deterministically."""
        return any(a.role == "key" for a in self.arguments)

    def positions(self, role: str, over: str = "tokens") -> tuple[int, ...]:
        """Positions in a case's arguments of those with `role` over `over`."""
        return tuple(i for i, a in enumerate(self.positional) if a.role == role and a.over == over)

    def call(self, impl, args: tuple, lengths=None, key=None, **keywords):
        """``impl.<verify>`` on `args`; the lengths, the key and `keywords` (options, validate) as keywords."""
        if self.lengths is not None and lengths is not None:
            keywords[self.lengths.name] = lengths
        if self.samples:
            keywords["key"] = key
        return getattr(impl, self.verify)(*args, **keywords)


@dataclasses.dataclass(frozen=True, repr=False, kw_only=True)
class BorrowingKernel(KernelSpec):
    """A kernel without cases of its own: it runs on those of ``cases_from`` (greedy on the chain's)."""

    cases_from: str
    """The kernel whose cases this one borrows."""
    valid_arguments: Callable[[Any], tuple]
    """Arguments (without the key) of a valid call, from a case of ``cases_from``."""


@dataclasses.dataclass(frozen=True, repr=False, kw_only=True)
class SteppedKernel(KernelSpec):
    """A sampling kernel with cases of its own, an ``apply_*`` step given its uniforms, and a float64 oracle.

    Callables take the spec's own case objects (`ncm_verify.harness.drivers.KernelCase`); those typed ``...``
    also take the kernel's keyword options (a tree's ``mode``), which a signature type cannot list per kernel.
    """

    apply: str
    """The same step given its uniforms ``[B, 2, columns]``."""
    uniform_columns: Callable[[tuple], int]
    """Columns of the uniforms ``apply`` takes, from the case's arguments."""
    outcome_shapes: Callable[[int, int], dict[str, tuple[int, ...]]]
    """Each outcome field's shape for a batch and a number of uniform columns."""
    fixtures: Fixtures
    make_arguments: Callable[..., tuple]
    """``make_arguments(fixture, batch=, rng=, max_draft=, **options)``: verify's arguments without the key, as
    MLX arrays."""
    step_arrays: Callable[..., tuple[tuple, int]]
    """``step_arrays(draw, tables, rng, batch=, vocab=, small=, over_drafted=, **options)``: float64 arguments of
    one step and its uniform columns; ``tables(shape)`` draws target and draft rows of a shape."""
    compare_step: Callable[..., Any]
    """Oracle: ``compare_step(*float64 arguments, uniforms, *outcome fields, **options) -> StepComparison``."""
    boundaries: Callable[..., Any]
    """Oracle: ``boundaries(args, uniforms, b, row, column, **options)``, where the float64 step's decision for
    that uniform flips, given the uniforms before it (`ncm_verify.oracles.exact.decision_boundaries`)."""
    emitted_target_probability: CaseView
    """The target's probability of every id (and latent) the outcome emitted."""
    # What only some kernels give: None where the kernel lacks it.
    step_relations: Any = None
    """How a step case's draft rows relate to its target rows (a strategy); None: the suite's `step_relations`."""
    acceptance_view: AcceptanceView | None = None
    """Kernels that judge each draft by p(x) / q(x) alone (not the block's)."""
    corrections: CaseView | None = None
    """Per drafted position, the correction the outcome drew there (-1 where it drew none); None where it is not
    drawn from the chain's residual."""
    well_formed: WellFormed | None = None

    def call_apply(self, impl, args: tuple, lengths, uniforms, **options):
        """``impl.<apply>`` on `args`, then the lengths (where taken), then the uniforms; options as keywords."""
        extra = () if self.lengths is None else (lengths,)
        return getattr(impl, self.apply)(*args, *extra, uniforms, **options)
