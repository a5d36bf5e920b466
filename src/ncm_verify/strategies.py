"""Every Hypothesis strategy of the suite. Strategies are plural nouns."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

seeds = st.integers(min_value=0, max_value=2**32 - 1)
"""Sampler seeds: drawn by Hypothesis so that every failure reproduces from its example."""
