"""A search space for ``python -m seqrec tune``: a YAML file whose keys are the dotted config keys of the
command-line flags, read, checked against the experiment's config, and sampled by an Optuna trial.

Either one distribution per key (Optuna's sampler, TPE by default, draws them)::

    model.lr: {float: [1.0e-4, 1.0e-2], log: true}     # FloatDistribution(low, high, log=..., step=...)
    model.weight_decay: {float: [0.0, 0.1], step: 0.01}
    data.batch_size: {int: [64, 256], step: 64}         # IntDistribution(low, high, log=..., step=...)
    model.net.dropout: {categorical: [0.1, 0.2, 0.3]}

or an exhaustive grid (``GridSampler``: every combination once)::

    grid:
      model.net.dropout: [0.1, 0.3]
      model.weight_decay: [0.0, 0.01]

A key is any form the command line accepts (``model.lr``, ``model.init_args.lr``), so the space does not change
when a config key moves under ``init_args``; the network's old key (``model.model.dropout``) reads as
``model.net.dropout`` with one note. YAML reads ``1e-4`` (no dot) as a string; numbers written that way
are read as numbers. ``check_space`` refuses, before anything runs, a key the config does not have and a
distribution that does not fit the key's value (a float range for an integer, a value the config's parser or
its checks reject), each as one ``ValueError`` naming the file and the key.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from jsonargparse import Namespace

from seqrec.checks import config_leaves
from seqrec.renamed_keys import rename_flag

if TYPE_CHECKING:
    import optuna

KINDS = ("float", "int", "categorical")
GRID_KEY = "grid"
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
Primitive = None | bool | int | float | str


def _number(value: Any) -> Any:
    """``value``, or the number a YAML 1.1 reader left as a string (``1e-4``)."""
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        number = float(value)
        return int(number) if re.fullmatch(r"[-+]?\d+", value.strip()) else number
    return value


def segments(key: str) -> tuple[str, ...]:
    """A dotted key without its ``init_args`` parts: ``model.init_args.lr`` and ``model.lr`` are the same key."""
    return tuple(part for part in key.split(".") if part != "init_args")


def cli_value(value: Primitive) -> str:
    """A value as a command-line flag's argument (``true``, ``null``, ``0.001``)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


@dataclass(frozen=True)
class Param:
    """One key of the space: a float or int range (``low``, ``high``, ``log``, ``step``) or a list of choices."""

    key: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Primitive, ...] = ()

    def extremes(self) -> list[Primitive]:
        """The values a check must accept for every draw to be accepted: both ends of a range, every choice."""
        return list(self.choices) if self.kind == "categorical" else [self.low, self.high]

    def describe(self) -> str:
        """The distribution as the space file wrote it (for messages)."""
        if self.kind == "categorical":
            return f"{{categorical: {list(self.choices)}}}"
        extra = (", log: true" if self.log else "") + (f", step: {self.step}" if self.step is not None else "")
        return f"{{{self.kind}: [{self.low}, {self.high}]{extra}}}"


@dataclass(frozen=True)
class Space:
    """The keys of a search space, and whether they form an exhaustive grid."""

    params: tuple[Param, ...]
    grid: bool = False

    def suggest(self, trial: optuna.trial.Trial) -> dict[str, Primitive]:
        """Draw (or, for a retried or enqueued trial, read back) every key's value for ``trial``."""
        return {p.key: _suggest(trial, p) for p in self.params}

    def grid_values(self) -> dict[str, list[Primitive]]:
        """``{key: values}`` for ``optuna.samplers.GridSampler``."""
        return {p.key: list(p.choices) for p in self.params}

    @property
    def size(self) -> int | None:
        """The number of grid points (None for a sampled space)."""
        return math.prod(len(p.choices) for p in self.params) if self.grid else None

    def as_dict(self) -> dict[str, Any]:
        """The space in its file's form (stored with a study: a re-run must search the same space)."""
        if self.grid:
            return {GRID_KEY: self.grid_values()}
        out: dict[str, Any] = {}
        for p in self.params:
            if p.kind == "categorical":
                out[p.key] = {"categorical": list(p.choices)}
            else:
                out[p.key] = {p.kind: [p.low, p.high], **({"log": True} if p.log else {}),
                              **({"step": p.step} if p.step is not None else {})}
        return out


def _suggest(trial: optuna.trial.Trial, p: Param) -> Primitive:
    """``trial.suggest_*`` for one key."""
    if p.kind == "float":
        return trial.suggest_float(p.key, p.low, p.high, log=p.log, step=p.step)
    if p.kind == "int":
        return trial.suggest_int(p.key, p.low, p.high, log=p.log, step=p.step or 1)
    return trial.suggest_categorical(p.key, p.choices)


def read_space(path: str | Path) -> Space:
    """Read a space file (see the module docstring); a one-line ValueError naming the file for anything else."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--space {path}: no such file (a YAML file of dotted config keys, see docs/TUNING.md)")
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ValueError(f"--space {path}: not valid YAML ({getattr(error, 'problem', error)})") from None
    return space_from_dict(document, f"--space {path}")


def space_from_dict(document: Any, where: str = "the space") -> Space:
    """A ``Space`` from the parsed YAML of a space file (``where`` names it in errors)."""
    if not isinstance(document, dict) or not document:
        raise ValueError(f"{where}: expected a mapping of dotted config keys to distributions, "
                         "e.g. 'model.lr: {float: [1.0e-4, 1.0e-2], log: true}' or 'grid: {model.lr: [0.001, 0.01]}'")
    if GRID_KEY in document:
        if len(document) > 1:
            raise ValueError(f"{where}: 'grid' searches every combination of its keys; move "
                             f"{sorted(k for k in document if k != GRID_KEY)} into it or drop the grid")
        grid = document[GRID_KEY]
        if not isinstance(grid, dict) or not grid:
            raise ValueError(f"{where}: 'grid' must map dotted config keys to lists of values")
        params = []
        for key, values in grid.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"{where}: grid key {key!r} must list its values, e.g. [0.1, 0.3]; got {values!r}")
            params.append(Param(space_key(key), "categorical", choices=_choices(where, key, values)))
        return Space(tuple(params), grid=True)
    return Space(tuple(_param(where, space_key(key), spec) for key, spec in document.items()))


def space_key(key: Any) -> str:
    """A space's key as the parser spells it now (``model.model.dropout``, from before the network was ``net``, is
    ``model.net.dropout``, with one note)."""
    return rename_flag(f"--{key}")[2:]


def _choices(where: str, key: str, values: list[Any]) -> tuple[Primitive, ...]:
    """Categorical or grid values: numbers, strings, booleans or null (what Optuna stores and a flag can carry)."""
    choices = tuple(_number(v) for v in values)
    for value in choices:
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise ValueError(f"{where}: {key}: choice {value!r} is a {type(value).__name__}; choices must be numbers, "
                             "strings, booleans or null (search a list-valued key through a scalar key of its own)")
    if len(set(map(repr, choices))) != len(choices):
        raise ValueError(f"{where}: {key}: the choices {list(choices)} repeat a value")
    return choices


def _param(where: str, key: str, spec: Any) -> Param:
    """One ``key: {float|int|categorical: ..., log: ..., step: ...}`` entry."""
    example = "{float: [1.0e-4, 1.0e-2], log: true}, {int: [1, 4]} or {categorical: [0.1, 0.2]}"
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: {key}: expected a distribution such as {example}; got {spec!r}")
    kinds = [k for k in spec if k in KINDS]
    unknown = sorted(set(spec) - set(KINDS) - {"log", "step"})
    if len(kinds) != 1 or unknown:
        raise ValueError(f"{where}: {key}: expected exactly one of {', '.join(KINDS)} (with log or step for a range), "
                         f"e.g. {example}; got {spec!r}")
    kind = kinds[0]
    if kind == "categorical":
        values = spec[kind]
        if not isinstance(values, list) or not values or set(spec) != {kind}:
            raise ValueError(f"{where}: {key}: categorical takes a non-empty list of values (and no log or step)")
        return Param(key, kind, choices=_choices(where, key, values))
    bounds = spec[kind]
    if not isinstance(bounds, list) or len(bounds) != 2:
        raise ValueError(f"{where}: {key}: {kind} takes [low, high]; got {bounds!r}")
    low, high = (_number(b) for b in bounds)
    step = _number(spec.get("step"))
    log = spec.get("log", False)
    number = (int,) if kind == "int" else (int, float)
    if any(isinstance(v, bool) or not isinstance(v, number) for v in (low, high)) or (
        step is not None and (isinstance(step, bool) or not isinstance(step, number) or step <= 0)
    ):
        raise ValueError(f"{where}: {key}: {kind} bounds{' and step' if step is not None else ''} must be "
                         f"{'integers' if kind == 'int' else 'numbers'}; got [{low}, {high}]"
                         f"{f' step {step}' if step is not None else ''}")
    if not isinstance(log, bool) or (log and step is not None) or (log and low <= 0):
        raise ValueError(f"{where}: {key}: log must be true or false, needs low > 0 and takes no step")
    if not low <= high:
        raise ValueError(f"{where}: {key}: {kind} range [{low}, {high}] has low > high")
    if kind == "float":
        low, high, step = float(low), float(high), None if step is None else float(step)
    return Param(key, kind, low, high, log, step)


# --- checked against the experiment ---------------------------------------------------------------------
def check_space(space: Space, config: Namespace, parse: Callable[[list[str]], Namespace], base_args: list[str],
                where: str) -> None:
    """Refuse a key ``config`` does not have, a range over a key of another type, a value the parser rejects.

    ``parse(base_args + ["--key", value, ...])`` validates each key's extreme values (both ends of a range,
    every choice) with the real parser and its value checks, as many at once as the keys allow.
    """
    leaves = dict(config_leaves(config))
    by_segments: dict[tuple[str, ...], list[str]] = {}
    for leaf in leaves:
        by_segments.setdefault(segments(leaf), []).append(leaf)
    for p in space.params:
        target = segments(p.key)
        if target in by_segments:
            current = leaves[by_segments[target][0]]
        elif any(s[: len(target)] == target for s in by_segments) and p.kind == "categorical":
            current = None  # a dict or list node: the parser judges each choice
        else:
            known = sorted({".".join(s) for s in by_segments})
            near = difflib.get_close_matches(".".join(target), known, n=3) or \
                [k for k in known if k.rsplit(".", 1)[-1] == target[-1]][:3]
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            raise ValueError(f"{where}: unknown key {p.key!r}: not a key of the config{hint} "
                             "(python -m seqrec fit --help lists every key)")
        _check_type(p, current, where)
    rounds = max(len(p.extremes()) for p in space.params)
    for i in range(rounds):
        chosen = [(p, p.extremes()[i % len(p.extremes())]) for p in space.params]
        try:
            _parse_quietly(parse, base_args + [a for p, v in chosen for a in (f"--{p.key}", cli_value(v))])
        except ValueError:
            for p, value in chosen:  # name the key that failed
                try:
                    _parse_quietly(parse, base_args + [f"--{p.key}", cli_value(value)])
                except ValueError as error:
                    raise ValueError(f"{where}: {p.key}: {p.describe()} does not fit the config: the value "
                                     f"{value!r} is refused ({error})") from None
            raise


def _check_type(p: Param, current: Any, where: str) -> None:
    """A range must fit the type of the key's current value (the parser accepts 16.0 for an int, 1 for a bool)."""
    if current is None:
        return
    kind = "bool" if isinstance(current, bool) else "int" if isinstance(current, int) else \
        "float" if isinstance(current, float) else "str" if isinstance(current, str) else type(current).__name__
    wrong = (p.kind == "float" and kind != "float") or (p.kind == "int" and kind not in ("int", "float"))
    if p.kind == "categorical":
        bad = [c for c in p.choices if c is not None and kind in ("bool", "int", "float", "str") and not (
            (kind == "bool" and isinstance(c, bool)) or (kind == "str" and isinstance(c, str))
            or (kind == "int" and isinstance(c, int) and not isinstance(c, bool))
            or (kind == "float" and isinstance(c, (int, float)) and not isinstance(c, bool)))]
        wrong = bool(bad)
    if wrong:
        raise ValueError(f"{where}: {p.key}: {p.describe()} does not fit the key's type: {kind} "
                         f"({current!r} in the config)" + ("; use {int: [low, high]}" if kind == "int" and p.kind == "float" else ""))


def _parse_quietly(parse: Callable[[list[str]], Namespace], args: list[str]) -> None:
    """``parse(args)``; the parser's own error line becomes the ValueError's message (nothing printed)."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            parse(args)
    except SystemExit:
        lines = [line.removeprefix("error: ") for line in captured.getvalue().splitlines() if line.strip()]
        raise ValueError(_innermost(lines[-1]) if lines else "refused by the config's parser") from None
    except Exception as error:  # noqa: BLE001 (a value check's ValueError, jsonargparse's type errors)
        raise ValueError(_innermost(str(error))) from None


def _innermost(message: str) -> str:
    """The innermost ``Parser key "k": reason`` of a jsonargparse message (which nests one per class level)."""
    message = " ".join(message.split())
    found = re.findall(r'Parser key "([^"]+)": (.*?)(?= - |$)', message)
    return f"{found[-1][0]}: {found[-1][1]}" if found else message

