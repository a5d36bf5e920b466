"""Exact float64 answers the properties judge against, independent of the reference implementation."""
