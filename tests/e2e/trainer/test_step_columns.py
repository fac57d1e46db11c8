"""Every /steps dataset of a real run is documented: read with h5py, each has non-empty
`units` and `description` attributes and is a row of `trainer --help-metrics` with the same
units, type and meaning, and the run writes every row of that table. One single-rank run and
one two-stage pipeline run (parallel.pp=2, two ranks), where the pp_* columns hold figures."""
import h5py
import pytest

from trainer_util import help_metrics, metrics, run_ranks, run_trainer

PIPELINE = ["parallel.pp=2", "training.micro_batch_size=1", "parallel.pp_microbatches=2"]


@pytest.fixture(scope="module")
def table():
    t = help_metrics()
    assert {"step", "loss", "pp_bubble_s", "pp_p2p_bytes"} <= set(t)
    return t


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def check_documented(f, table):
    steps = f["steps"]
    assert set(steps) == set(table), (sorted(set(steps) - set(table)),
                                      sorted(set(table) - set(steps)))
    for name in steps:
        d = steps[name]
        assert isinstance(d, h5py.Dataset), name
        units, description = text(d.attrs["units"]), text(d.attrs["description"])
        assert units and description, name
        assert (units, d.dtype.name, description) == table[name], name
        assert d.shape[0] > 0, name


def test_single_rank_columns_are_documented(tmp_path, table):
    run_trainer(tmp_path, "training.max_steps=2", "metrics.skip_first_steps=1")
    with metrics(tmp_path) as f:
        check_documented(f, table)


def test_pipeline_columns_are_documented(tmp_path, table):
    run_ranks(tmp_path, 2, *PIPELINE, "training.max_steps=2", "metrics.skip_first_steps=1")
    for rank in range(2):
        with metrics(tmp_path, rank) as f:
            check_documented(f, table)
            assert f["steps/pp_makespan_s"][:].min() > 0, rank
            assert f["steps/pp_p2p_bytes"][:].min() > 0, rank
