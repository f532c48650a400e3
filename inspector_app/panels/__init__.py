"""The inspector's panels, each a package of its own: its widget, its Qt model and its controller
side by side (``panels/<name>/widget.py``, ``model.py``, ``controller.py``). The side tabs they
fill are listed once, in :data:`inspector_app.logic.choices.SIDE_TABS`.

- :mod:`.audit`: the Audit tab, Revert on the summary card and a store that cannot be written.
"""
