"""Scheduling of the end-to-end tests (tests/e2e, tests/cluster) when they run side by side.

scripts/test.sh runs them in two passes (tests/README.md "How the suite runs"):

1. `-m "not timing" -n N --dist loadgroup` (pytest-xdist): every test may run beside any
   other, except that the tests of one xdist group run one after another on one worker.
   A test is in a group when it says so (`@pytest.mark.xdist_group("name")` or a module's
   `pytestmark`), else when it uses a fixture of RESOURCE_GROUPS (a fixed-name resource on
   the machine), else when it uses a module- or session-scoped fixture of its own module
   (the module's shared run is then made once, on one worker). Any other test, in a file
   added later too, is scheduled alone wherever a worker is free.
2. `-m timing`, without xdist: the tests that assert a wall-clock bound or measure the CPU,
   alone on the machine.

A plain `pytest tests/e2e` (no -n, no -m) runs every test in one process as before.
"""
import pytest

# Fixtures that stand for a resource with a fixed name on this machine: the tests using one
# share it, so they run in one group, one at a time.
RESOURCE_GROUPS = {
    # Network-namespace hosts h1, h2 (tests/cluster/netns.sh, launcher_util.netns_hosts):
    # the launcher tests count the bytes each host sends over eth0.
    "netns_hosts": "netns_h1_h2",
    # The SLURM test cluster (/run/ftb-slurm, one per machine) on its hosts s1, s2.
    "cluster": "slurm_cluster",
    # cut1, cut2 (launcher_util.cut_hosts): the tests cut their links and kill what is left.
    "cut_hosts": "netns_cut",
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "timing: asserts a wall-clock bound or measures CPU load; scripts/test.sh "
        "runs these alone, after the parallel pass")
    config.addinivalue_line(
        "markers", "quick: the end-to-end test of one program that `scripts/test.sh --quick` runs")
    config.addinivalue_line(
        "markers", "xdist_group(name): tests of one group run one after another on one "
        "pytest-xdist worker (they share a resource)")


def _own_shared_fixture(item):
    """True when the item uses a module/session-scoped fixture defined in its own module."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module_id = item.nodeid.split("::", 1)[0]
    for defs in info.name2fixturedefs.values():
        for d in defs:
            if d.scope in ("module", "package", "session") and d.baseid == module_id:
                return True
    return False


def group_of(item):
    """The xdist group of a test without an explicit one (None: schedule it alone)."""
    for name in getattr(item, "fixturenames", ()):
        if name in RESOURCE_GROUPS:
            return RESOURCE_GROUPS[name]
    if _own_shared_fixture(item):
        return item.nodeid.split("::", 1)[0]
    return None


def _suffix_group(item):
    """Writes the item's xdist group into its id as `nodeid@group`, the form the
    controller's LoadGroupScheduling reads. pytest-xdist 3.8 does this by setting
    `item._nodeid`, which pytest 9 no longer reads (the id is `item._id`), so its groups
    would be silently ignored; done here, as xdist would (names sorted, joined by "_")."""
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if not names or "@" in item.nodeid:
        return
    from _pytest.nodeid import NodeId  # pytest 9's structured id (scripts/requirements-venv.txt)
    item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


# tryfirst: before pytest-xdist's own hook, which reads the groups into the test ids.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = group_of(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
        if config.getoption("loadgroup", False) and hasattr(item, "_id"):
            _suffix_group(item)
