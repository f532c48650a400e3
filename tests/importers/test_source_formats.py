"""Every format an importer writes has its row in the one table that names a thread's source
(``engine.core.views.SOURCE_FORMATS``): the CLI, the pressure texts and the inspector (its Source
badges, their column's width, the "Imported from" filter) all read it. A format missing there read
as its raw name and, in a narrow thread list, as a bare dot."""

from __future__ import annotations

import importlib
import pkgutil

import engine.importers
from engine.core.views import SOURCE_FORMATS, SOURCE_NAMES, source_format_name


def importer_formats() -> set[str]:
    found = set()
    for info in pkgutil.iter_modules(engine.importers.__path__):
        module = importlib.import_module(f"engine.importers.{info.name}")
        fmt = getattr(module, "FORMAT", None)
        if isinstance(fmt, str):
            found.add(fmt)
    return found


def test_every_importers_format_is_named() -> None:
    formats = importer_formats()
    assert len(formats) >= 13  # claude-code … aider, gemini-cli, openhands-eval
    assert formats <= set(SOURCE_FORMATS), sorted(formats - set(SOURCE_FORMATS))
    assert set(SOURCE_NAMES) == set(SOURCE_FORMATS)


def test_names_badges_and_short_badges_are_filled_and_short_badges_short() -> None:
    for fmt, f in SOURCE_FORMATS.items():
        assert f.name and f.phrase and f.badge and f.short, fmt
        assert len(f.short) <= 3, fmt
        assert f.phrase.removeprefix("the ")[:1] == f.phrase.removeprefix("the ")[:1].strip(), fmt


def test_a_source_reads_by_its_name_and_an_unknown_one_as_written() -> None:
    assert source_format_name("gemini-cli") == "Gemini CLI" and source_format_name("openhands-eval") == "OpenHands eval"
    assert source_format_name("some-new-tool") == "some-new-tool"  # a store written by a newer version
    assert source_format_name(None) == "" and source_format_name("") == ""
