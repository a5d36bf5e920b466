"""Text drafting for an autoregressive target (issue 24): drafters propose blocks, the target verifies them."""

from ncm_verify.reference.drafting.base import DraftBlock, TextDrafter
from ncm_verify.reference.drafting.loop import DraftedGeneration, generate_drafted
from ncm_verify.reference.drafting.models import ARDrafter, NCMBlockDrafter, NCMDrafterConfig
from ncm_verify.reference.drafting.trained import load_trained

__all__ = [
    "ARDrafter",
    "DraftBlock",
    "DraftedGeneration",
    "NCMBlockDrafter",
    "NCMDrafterConfig",
    "TextDrafter",
    "generate_drafted",
    "load_trained",
]
