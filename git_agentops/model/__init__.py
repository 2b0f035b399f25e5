"""Value types and pure transition functions (runs, workers, tasks, requests, policy). No I/O here."""
