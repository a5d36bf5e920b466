"""Text drafting for an autoregressive target (issue 24): drafters propose blocks, the target verifies them."""

from ncm_verify.reference.drafting.base import DraftBlock, TextDrafter
from ncm_verify.reference.drafting.loop import DraftedGeneration, generate_drafted

__all__ = ["DraftBlock", "DraftedGeneration", "TextDrafter", "generate_drafted"]
