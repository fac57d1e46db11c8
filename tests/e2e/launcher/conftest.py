# Helpers and fixtures live in launcher_util.py: several test folders have a
# conftest.py, and a plain `from conftest import` would pick whichever came first.
# Importing the fixtures here makes pytest discover them for this folder.
from launcher_util import cut_hosts, launcher, netns_hosts  # noqa: F401
