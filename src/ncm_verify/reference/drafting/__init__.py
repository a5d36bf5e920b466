"""Text drafting for an autoregressive target (issue 24): drafters propose blocks, the target verifies them."""

from ncm_verify.reference.drafting.base import DraftBlock, TextDrafter
from ncm_verify.reference.drafting.models import ARDrafter, NCMBlockDrafter, NCMDrafterConfig
from ncm_verify.reference.drafting.trained import load_trained

__all__ = ["DraftBlock", "TextDrafter"]
__all__ += ["ARDrafter", "NCMBlockDrafter", "NCMDrafterConfig", "load_trained"]
