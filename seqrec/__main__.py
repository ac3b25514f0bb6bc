"""``python -m seqrec <command> ...``: the ``seqrec`` console script (``seqrec.cli``); ``seqrec --help`` lists the commands.

    seqrec fit --config lru_ml1m.yaml [--section.key value ...]       train, then test the best checkpoint
    seqrec test --config lru_ml1m.yaml --ckpt_path PATH               test a checkpoint under a config
    seqrec predict RUN_DIR [--ckpt_path best] [--users all|test|FILE] top-k items per user in the data's ids
    seqrec serve RUN_DIR [--port 8000] [--store F | --redis URL]      serve a run over HTTP, one durable state per user
    seqrec tune --config X.yaml --space S.yaml --trials N --study S   Optuna search (docs/TUNING.md)
    seqrec repro --configs lru_ml1m ... [--sitting_time T --resume]   paper reproductions in resumable sittings
    seqrec summarize RUN_DIR                                          rebuild a run's report (PNG, summary.md)
    seqrec lrd --config ...                                           long-range dependence of a dataset
    seqrec compare BASE_RUN RUN [RUN ...] [--metrics map@20 ...]       test metrics against a base run, paired per query

``python -m seqrec.fit`` stays a synonym of ``fit``, ``seqrec-fit`` of ``seqrec fit``.
"""

from seqrec.cli import main, script

__all__ = ["main"]

if __name__ == "__main__":
    script()
