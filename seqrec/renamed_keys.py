"""The task's network was called ``model`` and is ``net`` now: old configs, flags and checkpoints keep loading.

Before, a width was ``--model.init_args.model.init_args.d_model`` (the task is ``model``, its network was
``model`` again); now it is ``--model.net.d_model`` (``model.init_args.net`` in YAML) and the task's weights are
``net.*``. What was written the old way is read through these aliases, each with one line on stderr:

- a flag ``--model.model...`` or ``--model.init_args.model...`` (also ``=value`` forms):
  ``note: --model.model.d_model is now --model.net.d_model``;
- a config file (an experiment, a part, or a run's saved ``config.yaml``) whose task has ``model`` under
  ``init_args`` (or beside its ``class_path``): parsed as the same document with the key renamed,
  ``note: <file>: model.init_args.model is now model.init_args.net``; nothing is rewritten on disk (a run
  directory keeps what it logged);
- a checkpoint whose state_dict has ``model.*`` keys: loaded as ``net.*`` (a ``load_state_dict`` pre-hook of
  ``RecommendationTask``, so Lightning's resume and ``seqrec.load_run`` both take it).

Each note is printed once per process (a tuning study parses many configs).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

OLD, NEW = "model", "net"
TASK = "model"  # the top-level config key of the task
_FLAG = re.compile(rf"^--{TASK}\.(init_args\.)?{OLD}(?=$|[.=])")
_noted: set[str] = set()


def note(text: str) -> None:
    """Print ``note: text`` on stderr, once per process."""
    if text not in _noted:
        _noted.add(text)
        print(f"note: {text}", file=sys.stderr, flush=True)


def rename_flag(arg: str) -> str:
    """``--model.model.d_model`` / ``--model.init_args.model.init_args.d_model`` -> ``--model.net...``; other
    arguments unchanged."""
    match = _FLAG.match(arg)
    if match is None:
        return arg
    new = f"--{TASK}.{match.group(1) or ''}{NEW}{arg[match.end():]}"
    old_name, new_name = arg.split("=", 1)[0], new.split("=", 1)[0]
    note(f"{old_name} is now {new_name}")
    return new


def rename_config(document: Any) -> str | None:
    """Rename the task's ``model`` to ``net`` in a parsed config document, in place; the old key's path, or None
    when the document has none (or already says ``net``)."""
    task = document.get(TASK) if isinstance(document, dict) else None
    if not isinstance(task, dict):
        return None
    for holder, path in ((task.get("init_args"), f"{TASK}.init_args"), (task, TASK)):
        if isinstance(holder, dict) and OLD in holder and NEW not in holder:
            holder[NEW] = holder.pop(OLD)
            return f"{path}.{OLD}"
    return None


def rename_args(argv: list[str]) -> list[str]:
    """``argv`` with old flags renamed and each ``--config FILE`` that uses the old key replaced by the renamed
    document (jsonargparse takes a YAML string wherever it takes a config file)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config" and i + 1 < len(argv):
            out += [arg, _renamed_file(argv[i + 1])]
            i += 2
            continue
        if arg.startswith("--config="):
            out.append("--config=" + _renamed_file(arg.split("=", 1)[1]))
        else:
            out.append(rename_flag(arg))
        i += 1
    return out


def _renamed_file(value: str) -> str:
    """The file as given, or its renamed document as a YAML string when it uses the old key."""
    path = Path(value)
    if not path.is_file():
        return value
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return value  # the parser reports the file itself
    old = rename_config(document)
    if old is None:
        return value
    note(f"{path}: {old} is now {old[: -len(OLD)]}{NEW} (read with the new key; the file is unchanged)")
    return yaml.safe_dump(document, sort_keys=False)


def rename_old_state_dict_keys(module: Any, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook of a task: a checkpoint's ``model.*`` weights load as ``net.*`` (in place)."""
    old = [key for key in state_dict if key.startswith(f"{prefix}{OLD}.")]
    if not old or any(key.startswith(f"{prefix}{NEW}.") for key in state_dict):
        return
    for key in old:
        state_dict[f"{prefix}{NEW}.{key[len(prefix) + len(OLD) + 1:]}"] = state_dict.pop(key)
    note(f"a checkpoint written before the network was renamed: its {OLD}.* weights load as {NEW}.*")
