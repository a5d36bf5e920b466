"""The pytest plugin: options, the ``impl`` fixture, call recording, evidence, chi-square planning."""
