"""mlx-lm's real code under the suite's properties: tiny seeded mlx-lm models, mlx-lm's own
caches and decoding loop as a decoder module, and an exact stochastic verifier with the same call shape."""
