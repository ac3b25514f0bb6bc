"""benchmarks.baselines: make fit's config per seed, and a row as the table prints it."""

from benchmarks import baselines
from benchmarks.fit_grid import Outcome


def test_seed_42_is_make_fit_and_a_row_reads_its_outcome():
    assert baselines.sasrec_fit(42).flags == ("--seed_everything", "42")  # nothing else differs from `make fit`
    assert baselines.sasrec_fit(42).config == "sasrec_ml100k.yaml"
    test = {f"test/{m}": 0.1 * (i + 1) for i, m in enumerate(baselines.METRICS)}
    done = Outcome("runs/x", test, 0.11, 760, 76, 66, "early_stopping", 114.0, 120.2)
    assert baselines.row("SASRec", done) == (
        "| SASRec | 0.1000 | 0.2000 | 0.3000 | 0.4000 | 0.5000 | 0.6000 | 76 (66), early stop | 1.50 | "
        "114 s fit, 120 s in all |")
