"""The integration pipeline: in-memory merges, frozen deliveries, the candidate, its gate, reviews and publishing."""
