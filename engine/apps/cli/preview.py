"""``compaction preview``: show what the model would see of a tool output, and save the original.

    compaction preview --tool NAME [--shape SHAPE] [--limit TOKENS] [--preview-tokens N] [--workdir DIR] [FILE|-]

Runs the engine's own prune step (:func:`engine.compaction.pruning.prune_tool_result`) on the output. Over the
limit: the original is saved to the Workdir and the replacement is printed on stdout. At or under
the limit: the output is printed unchanged and stderr says so. Errors are one ``error: ...`` line on
stderr: exit 2 for bad input or options, exit 1 when the Workdir cannot be written (then nothing
is printed on stdout).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.compaction.pruning import PruneFailed, prune_tool_result
from engine.core.messages import tool_result
from engine.core.meter import default_meter
from engine.core.previews import DEFAULT_TOOL_SHAPES, SHAPES, PreviewBudgetError
from engine.core.workdir import Workdir

__all__ = ["DEFAULT_LIMIT_TOKENS", "DEFAULT_PREVIEW_TOKENS", "DEFAULT_WORKDIR", "add_parser", "run"]

DEFAULT_LIMIT_TOKENS = 2000
DEFAULT_PREVIEW_TOKENS = 600
DEFAULT_WORKDIR = "./workdir"

EXIT_WORKDIR = 1
EXIT_USAGE = 2


class _InputError(Exception):
    """The tool output cannot be read."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``preview`` sub-command on ``subparsers``."""
    p = subparsers.add_parser(
        "preview",
        help="show what the model would see of a tool output, and save the original",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--tool", required=True, metavar="NAME",
                   help="tool name (the preview follows the content's shape whatever the name; query_kb and web_search are configured to records)")
    p.add_argument("--shape", choices=SHAPES, metavar="SHAPE",
                   help=f"force the preview shape of this tool ({', '.join(SHAPES)}); default: detected from the content")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT_TOKENS, metavar="TOKENS",
                   help=f"offload results over this many tokens (default {DEFAULT_LIMIT_TOKENS})")
    p.add_argument("--preview-tokens", type=int, default=DEFAULT_PREVIEW_TOKENS, metavar="N",
                   help=f"token budget of the whole replacement, capped at --limit (default {DEFAULT_PREVIEW_TOKENS})")
    p.add_argument("--workdir", default=DEFAULT_WORKDIR, metavar="DIR",
                   help=f"where the full original is saved (default {DEFAULT_WORKDIR})")
    p.add_argument("file", nargs="?", default="-", metavar="FILE|-", help="tool output to read (default: stdin)")
    p.set_defaults(run=run)


def _read_input(name: str) -> str:
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise _InputError(f"cannot read {name}: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        source = "stdin" if name == "-" else name
        raise _InputError(f"{source} is not UTF-8 text (invalid byte at offset {exc.start})") from exc


def _write_stdout(text: str) -> None:
    out = sys.stdout
    buffer = getattr(out, "buffer", None)
    if buffer is None:  # a text-only stream (e.g. a test's capture)
        out.write(text)
    else:
        out.flush()
        buffer.write(text.encode("utf-8"))
    out.flush()


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    """Execute ``preview``; returns the exit code."""
    if args.limit < 0:
        return _fail(f"--limit must be 0 or more tokens (got {args.limit})", EXIT_USAGE)
    if args.preview_tokens <= 0:
        return _fail(f"--preview-tokens must be more than 0 (got {args.preview_tokens})", EXIT_USAGE)
    if not args.tool.strip():
        return _fail("--tool must not be empty", EXIT_USAGE)
    try:
        content = _read_input(args.file)
    except _InputError as exc:
        return _fail(str(exc), EXIT_USAGE)
    count = default_meter().count_text
    try:
        outcome = prune_tool_result(
            tool_result("cli-preview", content, name=args.tool),
            workdir=Workdir(args.workdir),
            count_tokens=count,
            limit_tokens=args.limit,
            preview_tokens=args.preview_tokens,
            shapes={**DEFAULT_TOOL_SHAPES, args.tool: args.shape} if getattr(args, "shape", None) else None,
        )
    except PreviewBudgetError as exc:
        knob = "--preview-tokens" if args.preview_tokens <= args.limit else "--limit (it caps --preview-tokens)"
        return _fail(f"{exc.message}; raise {knob}", EXIT_USAGE)
    if outcome is None:
        _write_stdout(content)
        print(f"note: {count(content)} tokens, at or under the limit of {args.limit}: shown unchanged, nothing saved",
              file=sys.stderr)
        return 0
    if isinstance(outcome, PruneFailed):
        return _fail(f"workdir not writable, nothing offloaded: {outcome.reason}", EXIT_WORKDIR)
    _write_stdout(outcome.preview + "\n")
    print(f"saved {outcome.path} ({outcome.original_tokens} tokens -> {outcome.preview_tokens} tokens shown)",
          file=sys.stderr)
    return 0
