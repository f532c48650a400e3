"""What-if runs: a recorded thread replayed through the engine under another policy, in a scratch copy.

:func:`run_whatif` reads a thread of the *source* store (keyset pages of messages, its system
prompt and tool schemas, its recorded model requests) and feeds it, in order, into a thread of a
*scratch* store: a temporary SQLite file with its own temporary Workdir, removed when the run ends
(finished, failed or cancelled). Nothing is ever written to the source database: it is only read.
The scratch file is a copy of an empty database the process migrated once (:func:`runs.open_scratch`);
a sweep (:func:`run_sweep`) reads the source once for all its runs when the thread has at most
:data:`runs.HELD_MESSAGES` messages.

The scratch thread is driven as the harness drives a live one (:mod:`engine.apps.harness.loop`), by
:class:`EngineReplay`: a request of the user starts a run (its own :class:`RunState`); before every
model request the recorded agent made, the engine's pressure path runs (:meth:`Compactor.pressure`
over the incremental :class:`SnapshotCache`, what ``Service.steps.compact_for_pressure`` calls) and the
envelope is measured (the compactor's measurement when it made one, else ``Compactor.measure``,
what ``Service.steps.measure`` calls); the first request is recorded as completed, so the thread is
routed. A check that would find the envelope below the threshold (and so write nothing) is
answered from the tally's sum without the database; the messages are appended in one batch through the
write door, and the real check made, at the first step that reaches the threshold (see
:class:`EngineReplay`). While a what-if runs, the garbage collector makes no automatic
collection (:func:`runs.no_automatic_collection`). A 100,000-message what-if takes about 20 seconds
(docs/benchmarks.md).

Where the agent called the model: before each assistant message; for an imported thread with
recorded usage (Claude Code writes one response as several assistant messages), before the first
assistant message after the message of the previous recorded response (each recorded response is
one request), and before each assistant message after the last recorded one.

:class:`WhatIfRun` holds the figures of one run; the *recorded* run is the same figures from what
happened in the source: its model requests (our estimate, or the usage an imported source
reported), its compaction history and events, and for an imported thread the compactions the
source recorded. Pressures are ratios to each run's own context window.

Settings (:data:`SETTINGS`): the policy's own names, with the short names of the issue as aliases
(``retained_tail`` = ``retained_tail_ratio``, ``tool_result_limit`` = ``tool_result_limit_tokens``,
``preview_budget`` = ``preview_tokens``), plus ``summarizer``: ``extractive`` (the offline,
deterministic default) or ``openai:<base_url>#<model>`` (an OpenAI-compatible endpoint through
:mod:`engine.llm`; the API key, if any, from ``COMPACTION_SUMMARY_API_KEY``). A bad key or value
raises :class:`WhatIfSettingError` (``invalid_whatif_setting``) before anything runs.
"""

from __future__ import annotations

from ..core.errors import Cancelled
from .results import WhatIfComparison, WhatIfPoint, WhatIfRun, WhatIfSweep
from .runs import EngineReplay, ReplayStep, recorded_run, run_sweep, run_whatif
from .settings import ALIASES, SETTINGS, WhatIfSettingError, WhatIfSummarizerFailed, parse_settings, parse_sweep

__all__ = [
    "ALIASES",
    "Cancelled",
    "EngineReplay",
    "ReplayStep",
    "SETTINGS",
    "WhatIfComparison",
    "WhatIfPoint",
    "WhatIfRun",
    "WhatIfSettingError",
    "WhatIfSummarizerFailed",
    "WhatIfSweep",
    "parse_settings",
    "parse_sweep",
    "recorded_run",
    "run_whatif",
    "run_sweep",
]
