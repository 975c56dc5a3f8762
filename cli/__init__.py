"""The command line's glue: option types, option groups, one-line errors, progress, checked outputs and the bodies
of the commands that `specsim.py` declares. The top of the house: it may import every other package."""
