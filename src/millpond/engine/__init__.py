"""The incremental engine: plans, operators, and the epoch coordinator."""
