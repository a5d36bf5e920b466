"""What a property's evidence must show to count as shown: the verdict (`report.status`) applies these, and the
properties that size their own runs read them here, beneath both, without importing the verdict."""

MIN_DISTINCT_EXAMPLES = 10
"""Distinct examples (distinct laws, for a statistical property) a Hypothesis property must run."""
MAX_FILTERED_FRACTION = 0.4
"""A property that lost more of its examples than this to `assume` or filters tested what was left, not its
claim (the reference's most filtered property loses 27% under `ci`)."""
