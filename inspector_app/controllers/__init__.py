"""The main window's behaviour, one component per concern; :mod:`inspector_app.main_window` wires them.

- :mod:`.threads`: the database, the thread list, opening a thread and its side panels;
- :mod:`.paging`: the timeline's pages, gaps and jumps;
- :mod:`.search`: finding text in the whole thread off the GUI thread;
- :mod:`.compaction`: *Compact now*;
- :mod:`.refresh`: polling and the live refresh;
- :mod:`.theming`: the theme menu and repainting on a theme change.

What they share is plain Python in :mod:`inspector_app.logic` (:mod:`~inspector_app.logic.state`,
:mod:`~inspector_app.logic.tasks`); a side panel with its own widget, model and controller is a
package in :mod:`inspector_app.panels`, registered in :data:`inspector_app.panels.registry.PANELS`.
Each controller is given the service facets it calls (``client.facets(...)``) and the window's
interface (:class:`inspector_app.logic.window.Window`), never another controller's lambda.
"""
