"""The run logger: a CSV record in the run directory plus Weights & Biases (offline unless an account is set up).

``RunLogger`` is a Lightning ``CSVLogger`` (so ``runs/<name>/version_N/`` stays the run directory:
metrics.csv, hparams.yaml, config.yaml, checkpoints/, test_metrics.json) that also forwards everything
to Lightning's ``WandbLogger`` when "wandb" is among ``loggers``:

- mode "auto" (default): ``$WANDB_MODE`` when set; "online" when an account is configured
  (``$WANDB_API_KEY``, or an api key in ~/.netrc as ``wandb login`` writes it); "offline" otherwise.
  Offline never prompts and never touches the network; the run lands in ``<run dir>/wandb/offline-run-*``
  and ``wandb sync <that folder>`` uploads it later. An online start that fails falls back to offline.
- the wandb run gets the full resolved config (config.yaml, written by the CLI before training), the
  task/data hyperparameters, every metric (``cost/*`` included), and when the run is closed a per-k
  test metrics table (``test/metrics_at_k``), the learning-curve plot and summary.md
  (``seqrec.tools.summarize`` writes the same files into the run directory for people without wandb).

``close()`` (called by ``seqrec.fit`` after testing, and at interpreter exit otherwise) writes the
report and finishes the wandb run, so a later run in the same process starts its own.

A run directory keeps everything it ever logged. Lightning's CSV logger deletes the ``metrics.csv`` of a
version it logs into again; ``AppendingWriter`` appends instead (header changes rewrite the file atomically),
writes every row as it is logged (``flush_logs_every_n_steps`` 1: a kill loses nothing that was logged), and
tags rows with the ``sitting`` they came from (0, then 1 for the first resume, ...). A resumed sitting starts
with a row ``{sitting: n}`` at the step it resumed from; the report (``seqrec.loggers.report``) reads the
history with later sittings replacing what earlier ones logged after that step, while the CSV keeps both.
The wandb run of a resumed version continues under the same run id.
"""

from __future__ import annotations

import atexit
import csv
import logging
import netrc
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from seqrec.atomic import atomic_write
from seqrec.lightning_private import drop_wandb_anonymous
from seqrec.loggers.report import SITTING, read_table, write_report
from seqrec.run_files import CONFIG, METRICS, version_dir

log = logging.getLogger(__name__)
LOGGER_NAMES = ("csv", "wandb")
WANDB_MODES = ("auto", "offline", "online", "disabled")


def wandb_installed() -> bool:
    """True when the wandb package can be imported."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        return False
    return True


def wandb_credentials() -> bool:
    """True when a wandb account is configured: $WANDB_API_KEY, or the api host's entry in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = os.environ.get("NETRC", str(Path.home() / ".netrc"))
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_wandb_mode(mode: str) -> str:
    """"auto" -> $WANDB_MODE if set, "online" with credentials, else "offline"; other modes as given."""
    if mode not in WANDB_MODES:
        raise ValueError(f"unknown wandb_mode {mode!r}: use one of {list(WANDB_MODES)}")
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    if env:
        return "offline" if env == "dryrun" else env
    return "online" if wandb_credentials() else "offline"


_OWN_RUNS: set[str] = set()  # ids of the wandb runs RunLoggers of this process started


def _wandb_logger(kwargs: dict[str, Any]) -> Any:
    """Lightning's WandbLogger without its deprecated ``anonymous`` init argument (wandb warns about it)."""
    from lightning.pytorch.loggers import WandbLogger

    logger = WandbLogger(**kwargs)
    drop_wandb_anonymous(logger)
    return logger


_WANDB_RUN_DIR = re.compile(r"^(?:offline-)?run-(?P<time>\d{8}_\d{6})-(?P<id>[a-z0-9]+)(?:-(?P<again>\d+))?$")


def previous_wandb_id(run_dir: Path) -> str | None:
    """The id of the newest wandb run logged in ``run_dir`` (``wandb/offline-run-<time>-<id>[-n]``), or None."""
    found = [m for p in (run_dir / "wandb").glob("*run-*") if p.is_dir() and (m := _WANDB_RUN_DIR.match(p.name))]
    if not found:
        return None
    newest = max(found, key=lambda m: (m["time"], int(m["again"] or 0)))
    return newest["id"]


def check_logger_names(loggers: list[str] | None) -> list[str]:
    """Normalised backend names; ValueError naming the valid ones for an unknown name or a missing "csv"."""
    names = [str(n).strip().lower() for n in (LOGGER_NAMES if loggers is None else loggers)]
    unknown = [n for n in names if n not in LOGGER_NAMES]
    if unknown:
        raise ValueError(f"unknown logger name(s) {unknown}: valid names are {list(LOGGER_NAMES)}")
    if "csv" not in names:
        raise ValueError(
            f"loggers={names} leaves out 'csv', the run directory's own record (metrics.csv, read by the "
            "summary and the plots): use loggers=['csv'] for no wandb, or ['csv', 'wandb']"
        )
    return names


class AppendingWriter(ExperimentWriter):
    """Lightning's CSV experiment writer, append-only across sittings (see the module docstring)."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        self.sitting = 0
        path = Path(self.metrics_file_path)
        if path.is_file() and path.stat().st_size:
            with open(path, "rb+") as handle:  # a row cut by a kill gets its own line, not the next row's
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    handle.write(b"\n")
            with open(path, newline="") as handle:
                reader = csv.reader(handle)
                header = next(reader, [])
                column = header.index(SITTING) if SITTING in header else None
                sittings = [row[column] for row in reader if column is not None and len(row) == len(header)]
            self.metrics_keys = [key for key in header if key]
            self.sitting = 1 + max((int(float(v)) for v in sittings if v), default=0)

    def _check_log_dir_exists(self) -> None:
        """Keep what the directory holds (Lightning deletes metrics.csv here)."""

    def log_metrics(self, metrics_dict: dict[str, float], step: int | None = None) -> None:
        """Record a row, tagged with this sitting."""
        super().log_metrics({**metrics_dict, SITTING: self.sitting}, step)

    def log_hparams(self, params: dict[str, Any]) -> None:
        """hparams.yaml, written atomically."""
        self.hparams.update(params)
        atomic_write(Path(self.log_dir) / self.NAME_HPARAMS_FILE, lambda tmp: save_hparams_to_yaml(tmp, self.hparams))

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        """Rewrite metrics.csv under a wider header, atomically (rows cut by a kill are kept as they are)."""
        path = Path(self.metrics_file_path)
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle))
        header = rows[0] if rows else []

        def write(tmp: str) -> None:
            with open(tmp, "w", newline="") as out:
                writer = csv.writer(out)
                writer.writerow(fieldnames)
                for row in rows[1:]:
                    cells = dict(zip(header, row))
                    writer.writerow([cells.get(name, "") for name in fieldnames])

        atomic_write(path, write)


class SittingMarker(Callback):
    """At the start of training, lets every ``RunLogger`` mark where a resumed sitting begins, and keeps the step
    and epoch it began at (``start_step``, ``start_epoch``: after a resume's restore, which ``Trainer.fit`` does
    inside itself; None before training starts) for the sitting's summary."""

    def __init__(self) -> None:
        self.start_step: int | None = None
        self.start_epoch: int | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Mark the sitting at the step the run resumed from."""
        self.start_step, self.start_epoch = trainer.global_step, trainer.current_epoch
        for logger in trainer.loggers:
            if isinstance(logger, RunLogger):
                logger.mark_sitting(trainer.global_step)


class RunLogger(CSVLogger):
    """CSV record of the run directory + optional wandb (see the module docstring).

    Args:
        save_dir: root of all runs (``runs``); the run directory is ``save_dir/name/version_N``.
        name: experiment name (default: the config file's name, set by ``seqrec.fit``).
        version: run version (default: the next free ``version_N``).
        loggers: backends, from ``LOGGER_NAMES`` ("csv" is the run directory's record and must stay).
        project: wandb project.
        wandb_mode: "auto", "offline", "online" or "disabled".
        flush_logs_every_n_steps: how often metrics.csv is written (1: every row as it is logged).
    """

    def __init__(
        self,
        save_dir: str = "runs",
        name: str | None = None,
        version: int | str | None = None,
        loggers: list[str] | None = None,
        project: str = "seqrec",
        wandb_mode: Literal["auto", "offline", "online", "disabled"] = "auto",
        flush_logs_every_n_steps: int = 1,
    ) -> None:
        super().__init__(save_dir, name=name or "default", version=version, flush_logs_every_n_steps=flush_logs_every_n_steps)
        names = check_logger_names(loggers)
        if wandb_mode not in WANDB_MODES:
            raise ValueError(f"unknown wandb_mode {wandb_mode!r}: use one of {list(WANDB_MODES)}")
        self.use_wandb = "wandb" in names and wandb_mode != "disabled"
        if self.use_wandb and not wandb_installed():
            warnings.warn("wandb is not installed (pip install wandb): logging to CSV only", stacklevel=2)
            self.use_wandb = False
        self.project, self.wandb_mode = project, wandb_mode
        self._wandb: Any = None
        self._closed = False

    def _get_next_version(self) -> int:
        """The next free ``version_N``, claimed by creating its folder (two runs started at once get two)."""
        version = super()._get_next_version()
        if rank_zero_only.rank != 0:
            return version
        root = Path(self.root_dir)
        root.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                version_dir(root, version).mkdir()
                return version
            except FileExistsError:
                version += 1

    @property
    @rank_zero_experiment
    def experiment(self) -> AppendingWriter:  # type: ignore[override]
        """The append-only CSV writer of the run directory."""
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = AppendingWriter(log_dir=self.log_dir)
        return self._experiment

    @rank_zero_only
    def mark_sitting(self, step: int) -> None:
        """Log the row that starts a resumed sitting at ``step`` (the report's boundary between sittings)."""
        writer = self.experiment
        if writer.sitting > 0:
            writer.log_metrics({}, step)
            self.save()

    # --- wandb ------------------------------------------------------------------------------------
    @property
    def wandb(self) -> Any:
        """Lightning's WandbLogger for this run (created on first use, rank 0 only), or None."""
        if not self.use_wandb or rank_zero_only.rank != 0:
            return None
        if self._wandb is None:
            self._wandb = self._start_wandb()
        return self._wandb

    def _start_wandb(self) -> Any:
        import wandb

        mode = resolve_wandb_mode(self.wandb_mode)
        if wandb.run is not None and wandb.run.id in _OWN_RUNS:
            wandb.finish()  # a previous RunLogger in this process was never closed
        directory = Path(self.log_dir)
        directory.mkdir(parents=True, exist_ok=True)
        kwargs = {
            "save_dir": str(directory), "project": self.project, "name": f"{self.name}-{directory.name}",
            "group": self.name, "mode": mode,
            "settings": wandb.Settings(silent=mode == "offline", init_timeout=60),
        }
        previous = previous_wandb_id(directory)
        if previous is not None:  # a resumed run directory continues its wandb run
            kwargs.update(id=previous, resume="allow")
        logger = _wandb_logger(kwargs)
        try:
            experiment = logger.experiment
        except Exception as error:  # noqa: BLE001 (no network, bad key: never lose the run)
            if mode != "online":
                raise
            log.warning("wandb online start failed (%s); logging offline instead", error)
            kwargs.update(mode="offline", settings=wandb.Settings(silent=True))
            logger = _wandb_logger(kwargs)
            experiment = logger.experiment
        _OWN_RUNS.add(experiment.id)
        if mode == "offline":
            folder = Path(experiment.dir).parent
            log.info("wandb offline run in %s (upload it later with `wandb sync %s`)", folder, folder)
        atexit.register(self.close)
        return logger

    def wandb_run_dir(self) -> Path | None:
        """The wandb run folder (``.../wandb/offline-run-*``) once started, else None."""
        if self._wandb is None or self._wandb._experiment is None:
            return None
        return Path(self._wandb._experiment.dir).parent

    # --- Logger API -------------------------------------------------------------------------------
    @rank_zero_only
    def log_hyperparams(self, params: Any = None, *args: Any, **kwargs: Any) -> None:
        """hparams.yaml, and in wandb the hyperparameters plus the full config.yaml of the run."""
        super().log_hyperparams(params)
        if self.wandb is not None:
            self.wandb.log_hyperparams(params if params is not None else {})
            config = Path(self.log_dir) / CONFIG
            if config.is_file():
                import yaml

                self.wandb.experiment.config.update({"config": yaml.safe_load(config.read_text())}, allow_val_change=True)

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """metrics.csv and wandb."""
        super().log_metrics(metrics, step)
        if self.wandb is not None:
            self.wandb.log_metrics(metrics, step)

    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Forwarded to wandb (uploads checkpoints only when configured to)."""
        if self.wandb is not None:
            self.wandb.after_save_checkpoint(checkpoint_callback)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Flush metrics.csv (Lightning calls this after fit and after test)."""
        super().finalize(status)
        if self._wandb is not None:
            self._wandb.finalize(status)

    @rank_zero_only
    def close(self, status: str = "success") -> None:
        """Write the run report (plot, per-k table, summary.md), push it to wandb and finish the wandb run."""
        if self._closed:
            return
        self._closed = True
        directory = Path(self.log_dir)
        report: dict[str, Path] = {}
        if (directory / METRICS).is_file():
            try:
                report = write_report(directory, wandb_dir=self.wandb_run_dir())
            except Exception as error:  # noqa: BLE001 (a report must never fail the run)
                log.warning("could not write the run report in %s: %s", directory, error)
        if self._wandb is None or self._wandb._experiment is None:
            return
        import wandb

        experiment = self._wandb.experiment
        payload: dict[str, Any] = {}
        if report.get("table") is not None:
            columns, rows = read_table(report["table"])
            payload["test/metrics_at_k"] = wandb.Table(columns=columns, data=rows)
        if report.get("plot") is not None:
            payload["report/learning_curve"] = wandb.Image(str(report["plot"]))
        if payload:
            experiment.log(payload)
        if report.get("summary") is not None:  # files in the run's files/ folder are uploaded with it
            shutil.copyfile(report["summary"], Path(experiment.dir) / "summary.md")
        experiment.finish(exit_code=0 if status == "success" else 1)
