"""The machinery that tests an implementation: strategies, drivers, checks, statistics, evidence."""
