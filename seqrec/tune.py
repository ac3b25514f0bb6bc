"""``python -m seqrec tune``: hyperparameter search over any config with Optuna (docs/TUNING.md).

This file runs the command and its trials; beside it, ``tune_experiment`` (what each trial runs and its
objective), ``tune_space`` (the search space), ``tune_storage`` (the study's database and the study-wide lock) and
``tune_report`` (the best config, the tables and the plots a study leaves).

    python -m seqrec tune --config sasrec_ml1m.yaml --space space.yaml --trials 20 --study NAME
        [--storage URL] [--pruner median|hyperband|none] [--seeds K [--top K]] [--runs_dir runs]
        [--heartbeat_interval S] [--section.key value ...]
    python -m seqrec tune --study NAME [--storage URL]      join (or continue) a study with its own arguments
    python -m seqrec tune --summary NAME [--storage URL]    the trials table and the plots

Each trial is a normal seqrec run: built by ``seqrec.build`` and run by ``seqrec.fit`` (its own run directory
``<runs_dir>/tune/NAME/trials/trial_N`` with config.yaml, metrics.csv and checkpoints), with the space's values
as dotted flags after the experiment's flags. Its objective is the protocol's monitored validation metric at the
protocol's own checkpoint selection (the first ModelCheckpoint's best score, in its mode); trials run with
``--test false``, so the test split is never evaluated while searching. ``ValidationPruning`` reports every
validation to the pruner (median or Hyperband; ``--pruner none`` turns it off).

Storage: a SQLite file ``<runs_dir>/tune/NAME/study.db`` unless ``--storage`` names any SQLAlchemy URL;
with PostgreSQL several workers on one or many machines run the same command against one study. The study ends
when ``--trials`` of its trials are finished (complete or pruned), counted over every worker and every run of the
command; each worker stays until then. A worker takes a study-wide lock (``StudyLock``) while it counts the
trials and starts one, so the workers never start more trials than the budget. Every trial keeps a heartbeat in
the storage; a trial whose worker died (SIGKILL, a lost machine) is failed by the next worker that looks and
queued again (``RetryHeartbeatStaleTrialCallback``, the current name of Optuna's ``RetryFailedTrialCallback``);
a trial stopped by SIGINT/SIGTERM is queued again at once. A queued trial keeps its values and its run directory
and resumes from its ``last.ckpt``.

When the study is finished: ``NAME_best.yaml`` (composes the experiment, adds the best trial's values and the
command's flags: ``python -m seqrec fit --config NAME_best.yaml`` reproduces the trial, then tests it), the
trials table ``trials.md`` and the plots beside it. ``--seeds K`` reruns the ``--top`` best trials on K seeds
(the config's seed and the next K-1) as full fits, test included, in a second study ``NAME.seeds`` run by the
same workers, and reports mean ± std (``seeds.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from seqrec.atomic import write_json
from seqrec.callbacks.pruning import ValidationPruning
from seqrec.callbacks.signals import Interrupted
from seqrec.cli import main as cli_main
from seqrec.fit import fit
from seqrec.runs import SUMMARY, TEST_METRICS, last_checkpoint
from seqrec.tune_experiment import Experiment, curve_unit, param_args, quiet_parse
from seqrec.tune_report import report_seeds, report_study, write_summary
from seqrec.tune_space import Space, check_space, read_space, segments, space_from_dict
from seqrec.tune_storage import MAX_RETRY, StudyLock, open_storage, shown, storage_url

log = logging.getLogger("seqrec.tune")

FINISHED_FIT = ("max_epochs", "max_steps", "early_stopping")  # fit_summary.json statuses of a fit that ended
ATTRS = "seqrec"  # the study's user attribute holding the arguments it was created with
# flags tune sets for every trial: where its run goes, and no test while searching
TUNE_SET = ("ckpt_path", "test", "trainer.logger.save_dir", "trainer.logger.name", "trainer.logger.version")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``seqrec tune`` (``seqrec.cli``): search, join, or summarise a study; every failure is one line."""
    return cli_main(["tune", *(sys.argv[1:] if argv is None else argv)])


# --- arguments ----------------------------------------------------------------------------------------------
def command(
    config: list[str] | None = None,
    space: str | None = None,
    trials: int | None = None,
    study: str | None = None,
    storage: str | None = None,
    runs_dir: str = "runs",
    pruner: Literal["median", "hyperband", "none"] = "median",
    pruner_startup_trials: int = 5,
    seeds: int = 1,
    top: int = 1,
    heartbeat_interval: int = 60,
    summary: str | None = None,
    overrides: list[str] | None = None,
) -> dict[str, Any]:
    """Hyperparameter search over a seqrec config with Optuna: start, join or continue a study, or summarise it.

    Every trial is a normal seqrec fit (without its test) in <runs_dir>/tune/NAME/trials/trial_N, with the space's
    values as dotted flags after the experiment's; any other --section.key value flag is given to every trial.
    Joining an existing study takes only --study (and --storage); see docs/TUNING.md.

    Args:
        config: experiment config (name or path); several stack (--config a --config b)
        space: search space: a YAML file of dotted config keys
        trials: finished trials the study ends with (default: a grid's size)
        study: study name (its folder <runs_dir>/tune/NAME and its name in the storage)
        storage: SQLAlchemy URL (default: sqlite:///<runs_dir>/tune/NAME/study.db)
        runs_dir: root of the run directories
        pruner: median, hyperband, or none
        pruner_startup_trials: median pruner: finished trials before any is pruned
        seeds: rerun the --top best trials on this many seeds
        top: how many of the best trials --seeds reruns
        heartbeat_interval: seconds between a trial's heartbeats; a trial silent for twice that is retried
        summary: print the trials table of study NAME and write its plots
        overrides: the experiment's config flags (--section.key value), given to every trial
    """
    args = argparse.Namespace(config=config, space=space, trials=trials, study=study, storage=storage,
                              runs_dir=runs_dir, pruner=pruner, pruner_startup_trials=pruner_startup_trials,
                              seeds=seeds, top=top, heartbeat_interval=heartbeat_interval, summary=summary)
    rest = list(overrides or [])
    check_args(args, rest)
    return tune(args, rest)


def check_args(args: argparse.Namespace, rest: list[str]) -> None:
    """tune's own flags in range, and no flag among the experiment's that tune sets for every trial."""
    for flag in [a for a in rest if a.startswith("--")]:
        key = flag[2:].split("=", 1)[0]
        if ".".join(segments(key)) in TUNE_SET:
            raise ValueError(f"{flag}: tune sets it for every trial (where trials run: --runs_dir; a trial is never "
                             "tested while searching; an interrupted trial resumes by itself)")
    for name in ("trials", "seeds", "top", "heartbeat_interval", "pruner_startup_trials"):
        value = getattr(args, name)
        least = 0 if name == "pruner_startup_trials" else 1
        if value is not None and value < least:
            raise ValueError(f"--{name} {value}: must be an integer >= {least}")
    if args.summary is None and not args.study:
        raise ValueError("--study NAME is required (or --summary NAME to see a study)")


# --- running trials until the budget is met -------------------------------------------------------------
def next_action(study: Any, budget: int, sample_new: bool) -> str:
    """"run", "wait" or "done": fail stale trials (queueing their retries), then count the study's trials.

    Done when ``budget`` trials are finished (complete or pruned). Run when a trial is queued, or (``sample_new``)
    when finished + running trials are fewer than the budget; otherwise wait for the running ones.
    """
    import optuna
    from optuna.trial import TrialState

    optuna.storages.fail_stale_trials(study)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    finished = sum(s in (TrialState.COMPLETE, TrialState.PRUNED) for s in states)
    running, waiting = states.count(TrialState.RUNNING), states.count(TrialState.WAITING)
    if finished >= budget:
        return "done"
    if waiting or (sample_new and finished + running < budget):
        return "run"
    return "wait" if running else "done"


def work(study: Any, lock: StudyLock, budget: int, objective: TrialRun, *, sample_new: bool, poll: float) -> None:
    """Run trials of ``study`` (``objective`` releases the lock once its trial exists) until ``next_action`` is done.

    A trial stopped by SIGINT/SIGTERM is queued again (the same values; it resumes from its last.ckpt) before
    the signal ends the command.
    """
    import optuna

    waiting_for: tuple[int, ...] | None = None
    while True:
        with lock.held_for():
            action = next_action(study, budget, sample_new)
            if action == "run":
                objective.current = None
                try:
                    study.optimize(objective, n_trials=1, gc_after_trial=True)
                except (Interrupted, KeyboardInterrupt) as stop:
                    queue_again(study, objective.current, stop)
                    raise
        if action == "done":
            return
        if action == "wait":
            running = tuple(t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)))
            if running != waiting_for:
                log.info("waiting for trial(s) %s, running elsewhere (a dead worker's trial is retried once its "
                         "heartbeat is stale)", ", ".join(map(str, running)))
                waiting_for = running
            time.sleep(poll)


def queue_again(study: Any, number: int | None, stop: BaseException) -> None:
    """Queue trial ``number``, failed by a signal, to run again with its values and resume its run directory."""
    import optuna

    trial = next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
    if trial is None or trial.state != optuna.trial.TrialState.FAIL:
        return
    optuna.storages.RetryHeartbeatStaleTrialCallback(MAX_RETRY, inherit_intermediate_values=True)(study, trial)
    if isinstance(stop, Interrupted):  # fit's advice (--ckpt_path) is tune's to follow, not the user's
        stop.args = (f"{str(stop).split('; resume with')[0]}; trial {number} is queued again and resumes from its "
                     "last.ckpt: rerun the same tune command to continue the study",)


@dataclass
class TrialRun:
    """The objective: one trial as a seqrec fit (see the module docstring), its value the monitored best score."""

    experiment: Experiment
    lock: StudyLock
    args_of: Callable[[Any], list[str]]  # the trial's own flags (its values, its seed)
    group: str = "trials"
    test: bool = False
    prune: bool = True
    current: int | None = None  # the number of the trial running now

    def __call__(self, trial: Any) -> float:
        """Fit the trial (resuming its run where one exists) and return its best monitored validation value."""
        import optuna

        self.lock.release()  # the trial exists: other workers may count it
        self.current = trial.number
        extra = self.args_of(trial)
        name = trial.user_attrs.get("run_name") or f"trial_{trial.number}"  # a retried trial keeps its run
        trial.set_user_attr("run_name", name)
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        exp = self.experiment
        run_dir = exp.folder / self.group / name
        summary = _read_json(run_dir / SUMMARY)
        pruning = ValidationPruning(trial, exp.monitor) if self.prune else None
        if not (summary.get("status") in FINISHED_FIT and (not self.test or (run_dir / TEST_METRICS).is_file())):
            args = exp.base_args + extra + [
                "--trainer.logger.init_args.save_dir", str(exp.folder),
                "--trainer.logger.init_args.name", self.group,
                "--trainer.logger.init_args.version", name,
                "--test", "true" if self.test else "false",
            ]
            if last_checkpoint(run_dir).is_file():
                args += ["--ckpt_path", str(run_dir)]
                log.info("trial %d resumes %s from its last.ckpt", trial.number, run_dir)
            try:
                fit(args, callbacks=[pruning] if pruning is not None else [])
            except SystemExit as exit_info:  # the run refused its arguments (printed above): fail, do not retry
                raise RuntimeError(f"trial {trial.number}: its run exited with status {exit_info.code}") from None
            summary = _read_json(run_dir / SUMMARY)
        trial.set_user_attr("fit", {k: summary.get(k) for k in ("status", "epochs", "global_step", "best_checkpoint")})
        if self.test:
            trial.set_user_attr("test", _read_json(run_dir / TEST_METRICS))
        if pruning is not None and pruning.pruned_at is not None:
            write_json(run_dir / SUMMARY, {**summary, "status": "pruned", "pruned_at": pruning.pruned_at})
            raise optuna.TrialPruned(f"pruned after the validation at {curve_unit(exp)} {pruning.pruned_at}")
        if summary.get("best_score") is None:
            raise ValueError(f"trial {trial.number} logged no {exp.monitor} (its budget ended before the first "
                             "validation): raise --trainer.max_epochs or --trainer.max_steps")
        return float(summary["best_score"])


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON file's content, {} when it is missing."""
    return json.loads(path.read_text()) if path.is_file() else {}


# --- the command ----------------------------------------------------------------------------------------
def tune(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    """Search (or join, or continue) a study, then write its best config and summary; ``--summary`` only reports."""
    optuna = _import_optuna()
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if args.summary is not None:
        return summary_command(args)
    exp = Experiment(list(args.config or []), overrides, args.study, Path(args.runs_dir))
    space = None
    if exp.configs or args.space:  # check what was given before touching any storage
        if not exp.configs or not args.space:
            raise ValueError("a search takes both --config and --space (or neither, to join an existing study)")
        space = read_space(args.space)
        exp.resolve()
        check_space(space, exp.config, quiet_parse, exp.base_args, f"--space {args.space}")
        _check_budget(space, args.trials)
    elif overrides:
        raise ValueError(f"{overrides[0]}: joining a study takes its own flags; give --config and --space to "
                         "search (the same ones as the study's)")
    url = storage_url(args.storage, exp.folder)
    if args.storage is None and space is None and not (exp.folder / "study.db").is_file():
        raise ValueError(f"no study {args.study!r} under {exp.folder.parent} (and no --storage): start it with "
                         "--config and --space")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")  # after the checks
    if args.storage is None:
        exp.folder.mkdir(parents=True, exist_ok=True)
    storage = open_storage(url, args.heartbeat_interval)
    lock = StudyLock(url, args.study)
    try:
        study, space, budget = _open_study(optuna, storage, lock, exp, space, args)
        log.info("study %s in %s: %d finished trials wanted", args.study, shown(url), budget)
        objective = TrialRun(exp, lock, lambda trial: param_args(space.suggest(trial)), prune=args.pruner != "none")
        work(study, lock, budget, objective, sample_new=True, poll=_poll(args.heartbeat_interval))
        result = report_study(study, exp)
        if args.seeds > 1:
            result["seeds"] = seed_reruns(optuna, storage, lock, exp, study, args)
    finally:
        lock.close()
    return result


def _import_optuna() -> Any:
    """optuna, or a one-line error naming the extra to install."""
    try:
        import optuna
    except ImportError:
        raise ValueError("python -m seqrec tune needs Optuna: pip install 'seqrec[tune]'") from None
    optuna.logging.set_verbosity(optuna.logging.INFO)
    return optuna


def _poll(heartbeat: int) -> float:
    """Seconds between looks at trials running elsewhere."""
    return float(min(30, max(1, heartbeat // 2)))


def _check_budget(space: Space, trials: int | None) -> None:
    """A sampled space needs --trials; a grid's --trials is at most its size."""
    if space.grid and trials is not None and trials > space.size:
        raise ValueError(f"--trials {trials}: the grid has {space.size} points; leave --trials out to run them all")
    if not space.grid and trials is None:
        raise ValueError("--trials N: how many finished trials the study ends with (a grid runs all its points)")


def _open_study(optuna: Any, storage: Any, lock: StudyLock, exp: Experiment, space: Space | None,
                args: argparse.Namespace) -> tuple[Any, Space, int]:
    """Create or load the study; record its arguments, or check them against the stored ones (or take them)."""
    if space is None and args.study not in optuna.get_all_study_names(storage):
        raise ValueError(f"no study {args.study!r} in {shown(storage.url)}: start it with --config and --space")
    pruner = {"median": optuna.pruners.MedianPruner(n_startup_trials=args.pruner_startup_trials),
              "hyperband": optuna.pruners.HyperbandPruner(),
              "none": optuna.pruners.NopPruner()}[args.pruner]
    with lock.held_for():  # one worker creates the study and records its arguments
        if args.study in optuna.get_all_study_names(storage):
            stored = storage.get_study_user_attrs(storage.get_study_id_from_name(args.study)).get(ATTRS)
            if stored is None:
                raise ValueError(f"study {args.study!r} in {shown(storage.url)} was not created by seqrec tune: "
                                 "use another --study")
            if space is None:  # joining: the study's own arguments
                exp.configs, exp.overrides = list(stored["configs"]), list(stored["overrides"])
                space = space_from_dict(stored["space"], f"study {args.study}")
                exp.resolve()
            else:
                _check_same(args.study, stored, exp, space)
            study = optuna.load_study(study_name=args.study, storage=storage, sampler=_sampler(optuna, space),
                                      pruner=pruner)
            budget = args.trials or stored["trials"]
            if budget != stored["trials"]:
                study.set_user_attr(ATTRS, {**stored, "trials": budget})
        else:
            budget = args.trials or space.size
            study = optuna.create_study(storage=storage, study_name=args.study, direction=exp.direction,
                                        sampler=_sampler(optuna, space), pruner=pruner)
            study.set_user_attr(ATTRS, {"configs": exp.configs, "overrides": exp.overrides, "space": space.as_dict(),
                                        "trials": budget, "monitor": exp.monitor, "curve": curve_unit(exp),
                                        "identity": exp.identity()})
    return study, space, budget


def _sampler(optuna: Any, space: Space) -> Any:
    """Every grid point once (GridSampler), or TPE over the distributions."""
    return optuna.samplers.GridSampler(space.grid_values()) if space.grid else optuna.samplers.TPESampler()


def _check_same(name: str, stored: dict[str, Any], exp: Experiment, space: Space) -> None:
    """A one-line ValueError when the study searched another experiment or another space."""
    before, now = stored["identity"], exp.identity()
    diff = [f"{k}: {before.get(k)!r} in the study, {now.get(k)!r} now" for k in sorted(set(before) | set(now))
            if before.get(k) != now.get(k)]
    if json.loads(json.dumps(stored["space"])) != json.loads(json.dumps(space.as_dict())):
        diff.insert(0, f"space: {stored['space']} in the study, {space.as_dict()} now")
    if diff:
        raise ValueError(f"study {name!r} searched another experiment ({'; '.join(diff[:4])}"
                         f"{'; ...' if len(diff) > 4 else ''}): use another --study, or join it with --study alone")


def summary_command(args: argparse.Namespace) -> dict[str, Any]:
    """``--summary NAME``: print the trials table (and the seeds table) and write the plots."""
    import optuna

    folder = Path(args.runs_dir) / "tune" / args.summary
    if args.storage is None and not (folder / "study.db").is_file():
        raise ValueError(f"no study {args.summary!r} under {folder.parent} (a study on another storage: add --storage URL)")
    url = storage_url(args.storage, folder)
    storage = open_storage(url, None)
    try:
        study = optuna.load_study(study_name=args.summary, storage=storage)
    except KeyError:
        raise ValueError(f"no study {args.summary!r} in {shown(url)}") from None
    stored = study.user_attrs.get(ATTRS, {})
    table, plots = write_summary(study, folder, stored.get("monitor", "value"), stored.get("curve", "step"))
    print(table)
    for path in [folder / "trials.md", *plots]:
        print(path)
    seeds = folder / "seeds.md"
    if seeds.is_file():
        print(seeds.read_text())
    return {"table": str(folder / "trials.md"), "plots": [str(p) for p in plots]}


# --- seeds ---------------------------------------------------------------------------------------------
def seed_reruns(optuna: Any, storage: Any, lock: StudyLock, exp: Experiment, search: Any,
                args: argparse.Namespace) -> dict[str, Any]:
    """Rerun the ``--top`` best trials on ``--seeds`` seeds (full fits, test included) in the study ``NAME.seeds``.

    Seeds: the config's ``seed_everything`` and the next K-1. Every (trial, seed) run is a queued trial of the
    seeds study, so the workers share them, a dead worker's run is retried and resumed, and a rerun skips the
    finished ones. Returns and writes (``seeds.md``) mean ± sample std of the validation value and each test metric.
    """
    complete = search.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    top = sorted(complete, key=lambda t: t.value, reverse=exp.direction == "maximize")[: args.top]
    base_seed = int(exp.config.get("seed_everything") or 0)
    seeds = [base_seed + i for i in range(args.seeds)]
    with lock.held_for():
        study = optuna.create_study(storage=storage, study_name=f"{exp.study}.seeds", direction=exp.direction,
                                    load_if_exists=True, sampler=optuna.samplers.RandomSampler(),
                                    pruner=optuna.pruners.NopPruner())
        queued = {(t.user_attrs.get("source_trial"), t.user_attrs.get("seed")) for t in study.get_trials(deepcopy=False)}
        for trial in top:
            for seed in seeds:
                if (trial.number, seed) not in queued:
                    study.enqueue_trial({}, user_attrs={"source_trial": trial.number, "seed": seed,
                                                        "run_name": f"trial_{trial.number}_seed_{seed}"})
        budget = len({t.user_attrs.get("run_name") for t in study.get_trials(deepcopy=False)})
    params = {t.number: t.params for t in complete}

    def args_of(trial: Any) -> list[str]:
        source, seed = trial.user_attrs["source_trial"], trial.user_attrs["seed"]
        return param_args(params[source]) + ["--seed_everything", str(seed)]

    objective = TrialRun(exp, lock, args_of, group="seeds", test=True, prune=False)
    work(study, lock, budget, objective, sample_new=False, poll=_poll(args.heartbeat_interval))
    return report_seeds(study, exp, top, seeds)


