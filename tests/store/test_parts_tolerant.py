"""Rows written by another program (plain SQL) with odd values in the columns of migration 0002 are
still read: unknown or malformed parts are skipped, wrong types become the defaults, an empty
meta kind or source key is no meta kind or key."""

from __future__ import annotations

import sqlalchemy as sa

from engine.store import Store, normalize_url

from .support import insert_legacy_rows


def test_odd_parts_and_fields_read_back(store: Store, conv: str) -> None:
    engine = sa.create_engine(normalize_url(store.url.render_as_string(hide_password=False)))
    try:
        insert_legacy_rows(engine, conv, [
            {"role": "user", "content": "a", "parts": [1, "x", {"type": "video"}, {"type": "image", "width": "big", "url": "data:x"},
                                                         {"type": "reasoning", "text": 5, "signature": ["s"]}]},
            {"role": "user", "content": "b", "parts": {"not": "a list"}, "meta_kind": "", "source_key": ""},
            {"role": "assistant", "content": "c", "parts": [{"type": "document", "source": "ftp", "byte_size": -4, "title": "t"}],
             "is_error": True, "meta_kind": "demo"},
        ])
    finally:
        engine.dispose()
    a, b, c = [s.message for s in store.messages_page(conv)]
    (image,) = a.attachments
    assert (image.kind, image.width, image.url, image.source) == ("image", None, None, "file")
    assert a.reasoning[0].text == "" and a.reasoning[0].signature is None
    assert (b.reasoning, b.attachments, b.meta_kind, b.source_key) == ((), (), None, None)
    (doc,) = c.attachments
    assert (doc.kind, doc.source, doc.byte_size, doc.title) == ("document", "file", None, "t")
    assert c.is_error is True and c.meta_kind == "demo"
