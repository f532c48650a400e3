"""openai-responses: the compaction items of a ``/responses/compact`` result and of a create request with
``context_management`` compaction are recorded source compactions with their trigger and tokens before."""

from __future__ import annotations

import json

from engine.importers import parse


def test_a_compact_endpoint_result_is_a_manual_compaction_with_its_tokens():
    result = {"id": "cmp_resp_1", "object": "response.compaction", "created_at": 1767000000,
              "output": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Refactor the parser."}]},
                         {"type": "compaction", "id": "cmp_9", "encrypted_content": "gAAAAABcompact"}],
              "usage": {"input_tokens": 91200, "output_tokens": 2100, "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens_details": {"reasoning_tokens": 0}}}
    (s,) = parse(json.dumps(result), "openai-responses")
    (c,) = s.compactions
    assert (c.trigger, c.tokens_before, c.summary, c.source_id, c.position) == ("manual", 91200, None, "cmp_9", 1)
    assert dict(c.details) == {"encrypted": True, "endpoint": "/responses/compact"}


def test_a_create_request_with_a_compaction_threshold_names_it():
    body = {"model": "gpt-5.2", "context_management": [{"type": "compaction", "compact_threshold": 200000}],
            "input": [{"role": "user", "content": "Go on."}],
            "output": [{"type": "compaction", "id": "cmp_2", "encrypted_content": "gAAAAAB"},
                       {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Continuing."}]}]}
    (s,) = parse(json.dumps(body), "openai-responses")
    (c,) = s.compactions
    assert (c.trigger, c.position) == ("compact_threshold ≥ 200,000", 1)
