"""ncm-verify: property tests for prefix caching and speculative drafting on MLX."""

__version__ = "0.1.0"
