"""The pure core: messages, the meter, units, previews, the surface builder, policy, events, views,
errors, figures and settings. It imports nothing else of the engine (the bottom layer of the
importlinter contract "Engine layers"); most of it is checked strictly by mypy."""
