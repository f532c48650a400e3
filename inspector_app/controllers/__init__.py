"""The main window's behaviour, one component per concern; :mod:`inspector_app.main_window` wires them.

- :mod:`.tasks`: window-wide background tasks and the ones bound to the open thread (cancelled
  when another thread, or a fresh view of the same one, is opened);
- :mod:`.threads`: the database, the thread list, opening a thread and its side panels;
- :mod:`.paging`: the timeline's pages, gaps and jumps;
- :mod:`.search`: finding text in the whole thread off the GUI thread;
- :mod:`.selection`: what the detail pane shows for the current row or event;
- :mod:`.compaction`: *Compact now*;
- :mod:`.refresh`: polling and the live refresh;
- :mod:`.theming`: the theme menu and repainting on a theme change.
"""
