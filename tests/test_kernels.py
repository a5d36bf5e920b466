"""The kernel registry agrees with the protocol it describes, and refuses specs that contradict themselves."""

import inspect

import pytest

from ncm_verify import protocol
from ncm_verify.harness.kernel_spec import Argument, BorrowingKernel, KernelSpec, SteppedKernel
from ncm_verify.harness.kernels import KERNEL_SPECS, SAMPLING_KERNELS, SINGLE_ROW_KERNELS, STEP_KERNELS


def protocol_parameters(name: str) -> list[str]:
    """A protocol entry point's parameters, without self and the validate switch."""
    family = next(family for family in protocol.PROTOCOLS if name in protocol.protocol_members(family))
    signature = inspect.signature(getattr(family, name))
    return [p for p in signature.parameters if p not in ("self", "validate")]


@pytest.mark.parametrize("spec", KERNEL_SPECS.values(), ids=lambda spec: spec.name)
def test_every_spec_lists_its_verify_arguments_as_the_protocol_declares_them(spec):
    assert sorted(protocol_parameters(spec.verify)) == sorted(spec.names)
    positional = [a.name for a in spec.positional]
    assert protocol_parameters(spec.verify)[: len(positional)] == positional


@pytest.mark.parametrize(
    "spec", [s for s in KERNEL_SPECS.values() if isinstance(s, SteppedKernel)], ids=lambda s: s.name
)
def test_every_apply_step_takes_the_positional_arguments_then_the_lengths_then_the_uniforms(spec):
    lengths = [spec.lengths.name] if spec.lengths else []
    options = [a.name for a in spec.options]
    assert protocol_parameters(spec.apply) == [a.name for a in spec.positional] + lengths + ["uniforms"] + options


def test_every_sampling_entry_point_of_the_protocol_has_a_spec():
    described = {name for spec in KERNEL_SPECS.values() for name in (spec.verify, getattr(spec, "apply", None)) if name}
    names = protocol.SPECULATIVE_NAMES + protocol.protocol_members(protocol.TreeVerification) + protocol.BLOCK_NAMES
    entry_points = {n for n in names if n.startswith("verify_") or n.startswith("apply_")}
    assert entry_points - {"apply_greedy"} <= described, "a protocol kernel the harness never drives"


def test_the_registry_groups_are_derived_from_the_specs():
    assert {s.name for s in SAMPLING_KERNELS} == {"chain", "factorized", "latent_chain", "tree", "block"}
    assert set(STEP_KERNELS) == set(SAMPLING_KERNELS)
    assert {s.name for s in SINGLE_ROW_KERNELS} == {"chain", "factorized"}


def test_every_spec_steps_on_cases_of_its_own_or_borrows_those_of_a_spec_that_does():
    for spec in KERNEL_SPECS.values():
        assert isinstance(spec, (SteppedKernel, BorrowingKernel)), spec.name
        if isinstance(spec, BorrowingKernel):
            assert isinstance(KERNEL_SPECS[spec.cases_from], SteppedKernel)


def test_a_spec_repr_names_the_registry_entry_that_rebuilds_it():
    assert repr(KERNEL_SPECS["chain"]) == "KERNEL_SPECS['chain']"


def test_an_option_must_list_its_values_and_only_an_option_may():
    with pytest.raises(ValueError, match="^values: "):
        Argument("mode", "option")
    with pytest.raises(ValueError, match="^values: "):
        Argument("p", values=(1, 2))


def test_an_unknown_role_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="^role: "):
        Argument("x", "weights")


def test_a_spec_naming_an_argument_twice_is_refused():
    with pytest.raises(ValueError, match="^arguments: "):
        KernelSpec("twice", (Argument("p"), Argument("p")), verify="verify_twice")
