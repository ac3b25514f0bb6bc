"""What a ``seqrec tune`` study leaves: the best trial's config (``NAME_best.yaml``, composing the experiment), the
trials table (``trials.md``), the plots, and the seeds table (``seeds.md``)."""

from __future__ import annotations

import os
import statistics
import warnings
from pathlib import Path
from typing import Any

import yaml

from seqrec.atomic import atomic_write, write_text
from seqrec.config_files import COMPOSE_KEY, CONFIG_DIR, resolve_config
from seqrec.tune_experiment import Experiment, curve_unit, param_args, quiet_parse
from seqrec.tune_space import segments


def report_study(study: Any, exp: Experiment) -> dict[str, Any]:
    """Write the best config, the trials table and the plots; print the table; return the best trial's figures."""
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    table, plots = write_summary(study, exp.folder, exp.monitor, curve_unit(exp))
    print(table)
    if not complete:
        raise RuntimeError(f"study {study.study_name}: no trial completed (see the table above), so there is no best config")
    best = study.best_trial
    path = write_best_config(exp, best, len(complete))
    print(f"best: trial {best.number}, {exp.monitor} {best.value:.6g}; refit: python -m seqrec fit --config {path}")
    return {"best_trial": best.number, "best_value": best.value, "best_params": best.params,
            "best_config": str(path), "table": str(exp.folder / "trials.md"), "plots": [str(p) for p in plots]}


EXCLUDED_FROM_BEST = ("config", COMPOSE_KEY, "ckpt_path", "test", "trainer.logger.init_args.save_dir",
                      "trainer.logger.init_args.name", "trainer.logger.init_args.version")


def best_config_tree(exp: Experiment, params: dict[str, Any]) -> dict[str, Any]:
    """What the trial's config adds to the experiment's files, as nested YAML keys: every key where they differ,
    and every searched key (also where its value is the experiment's: the file says what was chosen).

    Found by resolving both (so ``model.lr`` and ``model.init_args.lr`` land on the same key); a list that
    differs is written whole.
    """
    base = quiet_parse([a for c in exp.configs for a in ("--config", c)]).as_dict()
    full = quiet_parse(exp.base_args + param_args(params)).as_dict()
    searched = {segments(key) for key in params}
    tree: dict[str, Any] = {}

    def walk(before: Any, after: Any, path: tuple[str, ...]) -> None:
        if ".".join(path) in EXCLUDED_FROM_BEST:
            return
        if isinstance(after, dict) and isinstance(before, dict) and segments(".".join(path)) not in searched:
            for key, value in after.items():
                walk(before.get(key, _MISSING), value, path + (key,))
        elif after != before or segments(".".join(path)) in searched:
            node = tree
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = _plain(after)

    walk(base, full, ())
    return tree


_MISSING = object()


def _plain(value: Any) -> Any:
    """Tuples as lists (safe YAML)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def compose_entry(config: str, folder: Path) -> str:
    """How a best config in ``folder`` names an experiment file: a shipped name, else a path relative to it."""
    path = Path(os.path.realpath(resolve_config(config)))
    shipped = Path(os.path.realpath(CONFIG_DIR))
    if path.is_relative_to(shipped):
        return str(path.relative_to(shipped))
    return os.path.relpath(path, folder.resolve())


def write_best_config(exp: Experiment, best: Any, complete: int) -> Path:
    """``<study folder>/<study>_best.yaml``: composes the experiment, adds the command's flags and the trial's values."""
    path = exp.folder / f"{exp.study}_best.yaml"
    tree = best_config_tree(exp, best.params)
    header = (f"# Study {exp.study}: trial {best.number}, the best of {complete} complete trials, {exp.monitor} = "
              f"{best.value:.6g} ({exp.direction}; run {exp.folder / 'trials' / best.user_attrs.get('run_name', '')}).\n"
              f"# Its values: {', '.join(f'{k}={v}' for k, v in best.params.items())}.\n"
              f"# Written by python -m seqrec tune; refit, then test: python -m seqrec fit --config {path}\n")
    compose = f"{COMPOSE_KEY}: [{', '.join(compose_entry(c, exp.folder) for c in exp.configs)}]\n"
    body = yaml.safe_dump(tree, sort_keys=False, default_flow_style=None) if tree else ""
    write_text(path, header + compose + body)
    return path


def trials_table(study: Any, monitor: str) -> str:
    """The trials as a markdown table: number, state, value, each key's value, wall time, run, notes."""
    import optuna

    trials = study.get_trials(deepcopy=False)
    keys = list(dict.fromkeys(k for t in trials for k in t.params))
    best = _best_number(study)
    lines = ["| trial | state | " + " | ".join([monitor, *keys]) + " | wall (s) | run | note |",
             "|" + "---|" * (len(keys) + 6)]
    for t in trials:
        wall = (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete and t.datetime_start else None
        note = []
        if t.number == best:
            note.append("best")
        if "failed_trial" in t.system_attrs:
            note.append(f"retry of {t.system_attrs['retry_history'][-1]}")
        if t.state == optuna.trial.TrialState.PRUNED and t.intermediate_values:
            note.append(f"pruned at {max(t.intermediate_values)}")
        value = f"{t.value:.4f}" if t.value is not None and t.state == optuna.trial.TrialState.COMPLETE else ""
        cells = [str(t.number), t.state.name.lower(), value, *(_cell(t.params.get(k)) for k in keys),
                 f"{wall:.1f}" if wall is not None else "", t.user_attrs.get("run_name", ""), ", ".join(note)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _best_number(study: Any) -> int | None:
    """The best trial's number (None before any trial completed)."""
    try:
        return study.best_trial.number
    except ValueError:
        return None


def _cell(value: Any) -> str:
    """A parameter value in a table cell."""
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


PLOTS = {  # file -> optuna.visualization.matplotlib function (matplotlib, not plotly)
    "history.png": "plot_optimization_history",
    "importances.png": "plot_param_importances",
    "parallel_coordinate.png": "plot_parallel_coordinate",
    "curves.png": "plot_intermediate_values",
}


def write_summary(study: Any, folder: Path, monitor: str, unit: str) -> tuple[str, list[Path]]:
    """``trials.md`` (the table, with links to the plots) and the plots beside it; returns (table, plot paths)."""
    table = trials_table(study, monitor)
    plots, notes = write_plots(study, folder, monitor, unit)
    links = "\n".join(f"![{p.stem}]({p.name})" for p in plots)
    text = (f"# Study {study.study_name} ({study.direction.name.lower()} {monitor})\n\n{table}\n\n"
            + (f"{links}\n" if links else "") + "".join(f"\n{n}\n" for n in notes))
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / "trials.md", text)
    return table, plots


def write_plots(study: Any, folder: Path, monitor: str, unit: str) -> tuple[list[Path], list[str]]:
    """The optimisation history, parameter importances (PED-ANOVA), parallel coordinates and validation curves.

    Importances use PED-ANOVA (numpy only) rather than Optuna's default fANOVA, which needs scikit-learn.
    A plot that needs more trials than the study has is left out with a note saying why.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as plots

    written, notes = [], []
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    for name, function in PLOTS.items():
        kwargs: dict[str, Any] = {}
        if function != "plot_intermediate_values":
            kwargs["target_name"] = monitor
        if function == "plot_param_importances":
            kwargs["evaluator"] = optuna.importance.PedAnovaImportanceEvaluator()
        if not complete and function != "plot_intermediate_values":
            notes.append(f"({name}: no complete trial yet)")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                axes = getattr(plots, function)(study, **kwargs)
        except (ValueError, RuntimeError, ZeroDivisionError) as error:
            notes.append(f"({name} left out: {' '.join(str(error).split())[:200]})")
            continue
        axis = axes.flat[0] if hasattr(axes, "flat") else axes
        if function == "plot_intermediate_values":
            axis.set_xlabel(unit)
            axis.set_ylabel(monitor)
        figure = axis.figure
        atomic_write(folder / name, lambda tmp, fig=figure: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
        plt.close(figure)
        written.append(folder / name)
    return written, notes


def mean_std(values: list[float]) -> str:
    """``mean ± sample std`` (``mean`` alone for one value)."""
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}"


def report_seeds(study: Any, exp: Experiment, top: list[Any], seeds: list[int]) -> dict[str, Any]:
    """The seeds table (one row per rerun trial) printed and written to ``seeds.md``; the figures returned."""
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    rows, result = [], {}
    metrics = sorted({k for t in done for k in t.user_attrs.get("test", {}) if "@" in k or k.endswith(("auc", "loss"))})
    for trial in top:
        runs = [t for t in done if t.user_attrs["source_trial"] == trial.number and t.user_attrs["seed"] in seeds]
        if not runs:
            continue
        values = [t.value for t in runs]
        tests = {m: [t.user_attrs["test"][m] for t in runs if m in t.user_attrs.get("test", {})] for m in metrics}
        result[trial.number] = {"seeds": [t.user_attrs["seed"] for t in runs], "value": values,
                                "test": {m: v for m, v in tests.items() if v}}
        rows.append("| " + " | ".join([str(trial.number), ", ".join(f"{k}={_cell(v)}" for k, v in trial.params.items()),
                                       str(len(runs)), mean_std(values),
                                       *(mean_std(tests[m]) if tests[m] else "" for m in metrics)]) + " |")
    header = "| trial | params | seeds | " + " | ".join([exp.monitor, *metrics]) + " |"
    table = "\n".join([header, "|" + "---|" * (4 + len(metrics)), *rows])
    write_text(exp.folder / "seeds.md", f"# Study {exp.study}: the best trials on seeds {seeds} "
               f"(mean ± sample std; validation selects, the test is read only here)\n\n{table}\n")
    print(table)
    return result
