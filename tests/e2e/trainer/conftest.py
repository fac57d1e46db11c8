# The helpers live in trainer_util.py: several test folders have a conftest.py, and a
# plain `from conftest import` would pick whichever was imported first.
