"""Evidence collection, the ledger and the report writers."""
