"""Drop-in adapters that put agents of other frameworks on this engine.

One module per framework, each importing its framework at module level (so importing the module
without the framework installed raises ``ImportError`` naming the extra to install):

- :mod:`engine.adapters.langchain` — ``CompactionMiddleware``, a LangChain v1 ``AgentMiddleware``
  (``compaction-inspector[langchain]``);
- :mod:`engine.adapters.openai_agents` — ``EngineSession`` (an Agents SDK ``Session``) and
  ``CompactionModel`` (a ``Model`` wrapper for per-call compaction and overflow recovery)
  (``compaction-inspector[openai-agents]``);
- :mod:`engine.adapters.pydantic_ai` — ``EngineCompaction``, a Pydantic AI capability whose
  ``history_processor`` prunes and summarizes and whose model-request error hook recovers from
  overflows (``compaction-inspector[pydantic-ai]``).

Every adapter talks to the engine only through :class:`engine.service.Service` and the public types
(:mod:`engine.core.messages`, :mod:`engine.core.views`, :mod:`engine.core.events`, :mod:`engine.core.errors`,
:mod:`engine.llm.errors`); the shared driver is :mod:`engine.adapters.core`. This package imports
no framework itself.
"""
