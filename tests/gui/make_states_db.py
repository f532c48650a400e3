"""Build a small database whose threads show the header's pressure states, for the screenshots in
docs/screenshots (``python -m tests.gui.make_states_db DB``):

- ``over-threshold``: over the compaction threshold, inside the model's window;
- ``over-window``: more tokens than the window holds;
- ``cannot-compact``: one request larger than the threshold on a model no catalogue knows (an
  assumed window): a manual compaction has nothing to summarize (``--compact`` in the inspector).
"""

from __future__ import annotations

import sys

from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.service import open_service


def log(n_lines: int, tag: str) -> str:
    return "\n".join(f"{tag} {i:06d}: GET /api/v2/orders/{i % 977} 200 in {i % 91} ms (cache {'hit' if i % 3 else 'miss'})" for i in range(n_lines))


def build(db: str) -> None:
    svc = open_service(db)
    try:
        for key, title, model, lines in (
            ("over-threshold", "Order API latency review", "gpt-4o", 5_000),
            ("over-window", "Order API full access log", "gpt-4o", 7_000),
        ):
            svc.runs.create_thread(key, title=title, provider="openai", model=model)
            svc.runs.append_messages(key, [
                user("Why are order lookups slow since Monday?"),
                assistant("Let me read the access log.", ToolCall("c1", "read_log", '{"file": "access.log"}')),
                tool_result("c1", log(lines, "access"), name="read_log"),
                assistant("Lookups of orders over 900 miss the cache."),
                user("Check the cache configuration too."),
                assistant("", ToolCall("c2", "read_file", '{"path": "cache.yaml"}')),
                tool_result("c2", "ttl: 30s\nmax_entries: 900", name="read_file"),
                assistant("max_entries is 900: raise it."),
            ])  # fmt: skip
        svc.runs.create_thread("cannot-compact", title="One huge pasted request", provider="acme", model="acme-llm-7")
        svc.runs.append_messages("cannot-compact", [user("Summarize this log:\n" + log(6_000, "paste"))])
    finally:
        svc.close()


if __name__ == "__main__":
    build(sys.argv[1])
