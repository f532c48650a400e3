"""The Audit tab (the audit log: this thread or all, by operator and action), Revert on the summary
card and the read-only state (issue 23): :mod:`.widget` (the panel), :mod:`.model` (its rows),
:mod:`.controller` (what it does: reads on workers, the revert, write actions disabled read-only)."""
