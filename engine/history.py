"""A thread's compaction history: before/after diffs, the envelope of every request, cost, export."""
