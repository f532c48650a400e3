"""Compaction: pure plans (``plan``), the prune step (``pruning``), the summarizers, what a boundary
replays (``replay``), and the compactor that applies a plan through the store's write door."""
