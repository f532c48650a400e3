"""The applications on top of the engine: the ``compaction`` CLI, the demo store, and the agent
harness with its loopback OpenAI-compatible simulator."""
