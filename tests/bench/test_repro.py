import json

import pytest

from seqrec.bench.repro import report, shared_data_overrides
from seqrec.build import parse


def test_report_compares_with_the_paper(tmp_path):
    run = tmp_path / "lru_ml1m" / "version_0"
    run.mkdir(parents=True)
    (run / "test_metrics.json").write_text(json.dumps({"test/recall@10": 0.32636 * 1.02, "test/ndcg@10": 0.19298}))
    (run / "fit_summary.json").write_text(json.dumps({"epochs": 80, "global_step": 4500, "status": "early_stopping",
                                                       "seconds_this_sitting": 12.5}))
    table = report(["lru_ml1m", "sasrec_ml1m"], tmp_path, {"lru_ml1m": "python -m seqrec.fit ..."})
    assert "| lru_ml1m | recall@10 | 0.33289 | 0.32636 | +2.0% | 80 (4500) | early_stopping | 12.5 s |" in table
    assert "| lru_ml1m | ndcg@10 | 0.19298 | 0.19298 | +0.0% |" in table
    assert "| sasrec_ml1m | — | not run |" in table


def test_shared_data_overrides_parse(tmp_path):
    (tmp_path / "lrurec").mkdir()
    (tmp_path / "lrurec" / "ml-1m.txt.gz").write_bytes(b"")
    overrides = shared_data_overrides("lru_ml1m", tmp_path)
    config = parse(["--config", "lru_ml1m", *overrides])
    source = config.data.init_args.source
    assert source.class_path.endswith("SASRecText") and source.init_args.path.endswith("ml-1m.txt.gz")
    assert config.data.init_args.preprocessing.sort_by == "time"
    assert config.data.init_args.preprocessing.min_item_interactions == 0
    with pytest.raises(FileNotFoundError, match="lrurec/beauty.txt.gz"):
        shared_data_overrides("lru_beauty", tmp_path)
