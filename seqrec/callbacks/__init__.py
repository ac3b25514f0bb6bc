"""Lightning callbacks and the run logger: what every run costs and where it is recorded.

- ``macs.MACsCallback``: ``cost/macs_*`` per scored sequence and per training sample (fvcore or FlopCounterMode);
  its module docstring states the protocol models follow to declare hand formulas and state bytes;
- ``memory.MemoryCallback``: peak accelerator memory, peak RSS, per-user serving state (``cost/*``);
- ``throughput.ThroughputCallback``: samples/s and tokens/s in training, users/s in evaluation;
- ``loggers.RunLogger``: the run directory's CSV record plus wandb (offline unless an account is configured).

Every protocol composes them from configs/trainer/default.yaml (``--macs.*``, ``--memory.*``, ``--throughput.*``);
``seqrec.build.resume_callbacks`` are the fit-only ones (RNG state, signal and sitting checkpoints, sitting marker).
"""
