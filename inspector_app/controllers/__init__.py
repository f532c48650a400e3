"""The main window's behaviour, one component per concern; :mod:`inspector_app.main_window` wires them.

- :mod:`.threads`: the database, the thread list, opening a thread and its side panels;
- :mod:`.paging`: the timeline's pages, gaps and jumps;
- :mod:`.search`: finding text in the whole thread off the GUI thread;
- :mod:`.selection`: what the detail pane shows for the current row or event;
- :mod:`.compaction`: *Compact now*;
- :mod:`.refresh`: polling and the live refresh;
- :mod:`.theming`: the theme menu and repainting on a theme change.

What they share is plain Python in :mod:`inspector_app.logic` (:mod:`~inspector_app.logic.state`,
:mod:`~inspector_app.logic.tasks`); a panel with its own widget, model and controller is a package
in :mod:`inspector_app.panels`.
"""
