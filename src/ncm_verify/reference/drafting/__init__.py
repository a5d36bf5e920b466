"""Text drafting for an autoregressive target: drafters propose blocks, the target verifies them."""

from ncm_verify.reference.drafting.base import DraftBlock, EnumerableDrafter, TextDrafter
from ncm_verify.reference.drafting.concept_drafter import ConceptBlockDrafter, ConceptDrafterConfig
from ncm_verify.reference.drafting.loop import DraftedGeneration, generate_drafted
from ncm_verify.reference.drafting.models import ARDrafter
from ncm_verify.reference.drafting.trained import load_trained

__all__ = [
    "ARDrafter",
    "ConceptBlockDrafter",
    "ConceptDrafterConfig",
    "DraftBlock",
    "DraftedGeneration",
    "EnumerableDrafter",
    "TextDrafter",
    "generate_drafted",
    "load_trained",
]
