"""Config files: shipped names, composition (``compose:``) and the expansion of ``--config`` arguments.

- a bare name (``lru_ml1m``, ``lru_ml1m.yaml``, ``configs/lru_ml1m.yaml``) that is not a file in the current
  directory is looked up among the configs shipped with the package;
- a config may start with ``compose: [protocol/lrurec_ml1m.yaml, model/lru.yaml]``: those parts (paths relative
  to the file, or shipped names) are stacked before it, recursively, so an experiment file names its parts and
  only what differs (docs/ARCHITECTURE.md, "Configs").
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

CONFIG_DIR = Path(__file__).parent / "configs"
COMPOSE_KEY = "compose"

def shipped_configs() -> list[str]:
    """Names of the shipped experiment configs (top level of the configs folder)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def resolve_config(name: str, relative_to: Path | None = None) -> str:
    """A config path as given if it exists (or relative to ``relative_to``), else the shipped config of that name.

    FileNotFoundError (naming the shipped experiments) when neither exists.
    """
    candidates = [Path(name)]
    if relative_to is not None:
        candidates.insert(0, relative_to / name)
    bare = name[len("configs/"):] if name.startswith("configs/") else name
    candidates += [CONFIG_DIR / bare, CONFIG_DIR / f"{bare}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError(
        f"config {name!r} is neither a file nor a shipped config; shipped experiments: {', '.join(shipped_configs())}"
    )


def read_compose(path: str) -> list[str]:
    """The ``compose`` list at the top of a config file ([] when it has none)."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{path}{where}: not valid YAML ({getattr(error, 'problem', error)})") from None
    parts = (document or {}).get(COMPOSE_KEY) if isinstance(document, dict) else None
    if parts is None:
        return []
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise ValueError(f"{path}: '{COMPOSE_KEY}' must be a list of config files, got {parts!r}")
    return parts


def expand_config(name: str, relative_to: Path | None = None, _seen: tuple[str, ...] = ()) -> list[str]:
    """The files a config stands for, in stacking order: its composed parts (recursively), then itself."""
    path = resolve_config(name, relative_to)
    real = os.path.realpath(path)
    if real in _seen:
        raise ValueError(f"config {path} composes itself (cycle: {' -> '.join(_seen + (real,))})")
    files: list[str] = []
    for part in read_compose(path):
        for file in expand_config(part, Path(path).parent, _seen + (real,)):
            if file not in files:
                files.append(file)
    files.append(path)
    return files


def expand_config_args(argv: list[str]) -> tuple[list[str], str | None]:
    """Rewrite every ``--config NAME`` into the existing files it composes; also return the first config's name.

    The name (the file stem of the first ``--config`` the user gave, e.g. ``lru_ml1m``) names the run.
    """
    out: list[str] = []
    first: str | None = None
    i = 0
    while i < len(argv):
        arg, value = argv[i], None
        if arg == "--config" and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        elif arg.startswith("--config="):
            value, i = arg.split("=", 1)[1], i + 1
        else:
            out.append(arg)
            i += 1
            continue
        files = expand_config(value)
        first = first or Path(files[-1]).stem
        for file in files:
            out += ["--config", file]
    return out, first
