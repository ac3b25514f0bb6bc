"""Cost accounting: multiply-accumulate counts (``flops``) and per-user serving state (``state``)."""
