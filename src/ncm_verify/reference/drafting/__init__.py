"""Text drafting for an autoregressive target (issue 24): drafters propose blocks, the target verifies them."""

from ncm_verify.reference.drafting.base import DraftBlock, TextDrafter

__all__ = ["DraftBlock", "TextDrafter"]
