"""The inspector's plain Python (no Qt; the import contract "The inspector's logic is plain Python"
holds it): what the window shows, decided where a test can call it without a display.

- :mod:`.choices`: the names the command line and the window share (themes, the side tabs);
- :mod:`.pressure_text`: the pressure states in words;
- :mod:`.whatif`: the what-if dialog's settings, sweep values, result rows and progress throttle;
- :mod:`.urls`: a database URL's password, stripped or masked;
- :mod:`.timeline`: the timeline core (page types, the unit/round tree, gap/segment arithmetic);
- :mod:`.state`: the open thread's state and how a failure reads (what the controllers share);
- :mod:`.tasks`: the window's asyncio task groups (window-wide, and the open thread's, cancelled
  when another view opens).
"""
