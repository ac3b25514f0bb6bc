"""Command-line tools: ``python -m seqrec.tools.summarize RUN_DIR`` (a run directory -> learning-curve PNG and
markdown summary), ``python -m seqrec.tools.lrd`` (long-range dependence of item sequences)."""
