"""The inspector's panels, each a package of its own: its widget, its Qt model and its controller
side by side (``panels/<name>/widget.py``, ``model.py``, ``controller.py``). The side tabs they
fill are listed once, in :data:`inspector_app.logic.choices.SIDE_TABS`.

The one list that registers them (page and controller, in tab order) is
:data:`.registry.PANELS`; a panel imports neither :mod:`inspector_app.controllers` nor
:mod:`inspector_app.layout` (both import the panels), and reaches the timeline's paging through
:class:`.ports.Paging`.

- :mod:`.detail`: the detail pane (a message in full, the summary and source-compaction cards);
- :mod:`.pressure`: the gauge and the chart (fed with the thread's status; no controller of its own);
- :mod:`.replay`: requests, recoveries and the before/after of a compaction;
- :mod:`.events`: the compaction events; a click shows its row in the timeline;
- :mod:`.checks`: the invariants of docs/schema.md for the open thread;
- :mod:`.audit`: the Audit tab, Revert on the summary card and a store that cannot be written.
"""
