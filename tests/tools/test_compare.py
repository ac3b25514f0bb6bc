"""``seqrec compare``: fit and test write test_ranks.csv; paired differences and their s.e. by hand."""

import json
import math

import numpy as np
import pytest

from seqrec.cli import main as cli_main
from seqrec.fit import main as fit_main
from seqrec.metrics.query_ranks import read_ranks_csv
from seqrec.tools.compare import paired


def test_paired_difference_and_standard_error_by_hand():
    base = np.array([[0, 1], [1, 4], [2, 30]])
    run = np.array([[0, 2], [1, 1], [2, 30]])
    row = paired("run", [(base, run)], "mrr@10")
    d = np.array([0.5 - 1.0, 1.0 - 0.25, 0.0])  # per-query MRR@10 differences
    assert row.queries == 3
    assert row.base == pytest.approx((1 + 0.25 + 0) / 3) and row.value == pytest.approx((0.5 + 1 + 0) / 3)
    assert row.difference == pytest.approx(d.mean())
    assert row.se == pytest.approx(d.std(ddof=1) / math.sqrt(3))
    low, high = row.interval
    assert low == pytest.approx(d.mean() - 1.959964 * row.se) and high == pytest.approx(d.mean() + 1.959964 * row.se)


def test_other_queries_are_refused():
    with pytest.raises(ValueError, match="other test queries"):
        paired("run", [(np.array([[0, 1], [1, 2]]), np.array([[0, 1], [2, 2]]))], "hr@10")


def test_fit_writes_ranks_and_compare_pairs_two_runs(tiny_fit, tmp_path, capsys):
    """Two fits of different seeds on the same data: each run's ranks reproduce its own test metrics, and the
    command reports their difference; a run without ranks is one line naming the fix."""
    results = {}
    for seed in (1, 2):
        results[seed] = fit_main(tiny_fit(tmp_path / f"s{seed}", "--trainer.max_epochs", "1", "--seed_everything",
                                          str(seed)))
    runs = [tmp_path / f"s{seed}" / "sasrec_ml100k" / "version_0" for seed in (1, 2)]
    for seed, run in zip((1, 2), runs, strict=True):
        table = read_ranks_csv(run / "test_ranks.csv")
        assert len(table) == 60 and np.array_equal(table[:, 0], np.arange(60))  # one query per user, by index
        hits = (table[:, 1] <= 10).mean()
        assert hits == pytest.approx(results[seed]["test/hr@10"], abs=1e-6)
    out = tmp_path / "compare.json"
    cli_main(["compare", str(runs[0]), str(runs[1]), "--metrics", "hr@10", "ndcg@10", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [row["metric"] for row in rows] == ["hr@10", "ndcg@10"]
    assert rows[0]["base"] == pytest.approx(results[1]["test/hr@10"], abs=1e-6)
    assert rows[0]["difference"] == pytest.approx(results[2]["test/hr@10"] - results[1]["test/hr@10"], abs=1e-6)
    assert "paired s.e." in capsys.readouterr().out
    (runs[1] / "test_ranks.csv").unlink()
    with pytest.raises(SystemExit):
        cli_main(["compare", str(runs[0]), str(runs[1])])
    message = capsys.readouterr().err
    assert "has no test_ranks.csv" in message
    # the fix it names works: seqrec test of that checkpoint writes a run directory holding the same ranks
    hint = message.split("(python -m seqrec ", 1)[1].split(")", 1)[0].split()
    assert hint[0] == "test"
    retested = cli_main(hint)
    again = tmp_path / "s2" / "sasrec_ml100k" / "version_1"
    assert retested["test/hr@10"] == pytest.approx(results[2]["test/hr@10"], abs=1e-6)
    rows = cli_main(["compare", str(runs[0]), str(again), "--metrics", "hr@10"])
    assert rows[0].difference == pytest.approx(results[2]["test/hr@10"] - results[1]["test/hr@10"], abs=1e-6)

