"""``seqrec <command> ...`` (the same as ``python -m seqrec <command> ...``): one parser for every command.

``fit`` and ``test`` are LightningCLI commands (``seqrec.fit``, ``seqrec.evaluate``: ``--config X.yaml
--section.key value``). Every other command is a typed function whose signature is its command line, read by
jsonargparse as litgpt's ``CLI`` reads its functions: a parameter without a default is positional, every other
one is a ``--snake_case`` flag of the parameter's type, the help texts are the function's docstring. Flags keep
the forms the commands always took: ``--flag value`` or ``--flag=value``; a ``bool`` flag alone means true
(``--resume`` = ``--resume true``); a list flag takes several values (``--configs a b``) or is repeated
(``--config a --config b``). A command with an ``overrides`` parameter passes flags it does not know (or, for
``repro``, everything after ``--``) to the run's config, which checks them.

Old spellings keep working and print one line each: ``note: --checkpoint is now --ckpt_path`` (``Command.renamed``),
and any ``--kebab-case`` flag whose ``--snake_case`` form exists. Every failure is one line ``error: ...``
(``seqrec.errors.run_command``; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

PROG = "seqrec"
OVERRIDES = "overrides"  # the parameter that receives the run's config flags
BOOL_WORDS = ("true", "false", "yes", "no")
LIGHTNING = {"fit": "seqrec.fit", "test": "seqrec.evaluate"}  # LightningCLI: their module's main(argv)
# the development benchmarks live outside the package: benchmarks/ of a source checkout
BENCHMARKS = ("pipeline", "lru_speed", "lru_recurrence", "compress", "speed", "xlong", "serve", "mlp4rec_mixers",
              "step_ab", "precision_curves", "split_difficulty", "baselines", "evornn", "mlp4rec")


@dataclass(frozen=True)
class Command:
    """A command: ``target`` ("module:function") is its typed entry point; ``renamed`` maps old flags to new ones.

    ``overrides``: which arguments reach the function's ``overrides`` parameter: ``"unknown"`` (every flag the
    command does not know, with its value, and everything after ``--``) or ``"after_dashes"`` (only after ``--``).
    """

    target: str
    renamed: dict[str, str] = field(default_factory=dict)
    overrides: Literal["unknown", "after_dashes"] = "unknown"

    def function(self) -> Callable[..., Any]:
        """The entry point (imports its module)."""
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)


COMMANDS: dict[str, Command] = {
    "predict": Command("seqrec.predict:command", {"--checkpoint": "--ckpt_path"}),
    "serve": Command("seqrec.serve.cli:command", {"--checkpoint": "--ckpt_path"}),
    "tune": Command("seqrec.tune:command"),
    "repro": Command("seqrec.bench.repro:command", {"--max-time": "--sitting_time", "--max_time": "--sitting_time"},
                     overrides="after_dashes"),
    "summarize": Command("seqrec.tools.summarize:command"),
    "lrd": Command("seqrec.tools.lrd:command"),
    "compare": Command("seqrec.tools.compare:command"),
}


# --- the help ---------------------------------------------------------------------------------------------
def _docstring(module: str, function: str | None) -> str:
    """The docstring of ``module`` (or of its ``function``), read from the source without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return ""
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    if function is None:
        return ast.get_docstring(tree) or ""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return ast.get_docstring(node) or ""
    return ""


def summary_line(name: str) -> str:
    """The one-line description of a command: its function's (or, for fit and test, its module's) first line."""
    if name in LIGHTNING:
        first = _docstring(LIGHTNING[name], None).split("\n\n")[0]
        line = " ".join(first.replace("``", "").split()).split(": ")[-1]
        return line[:1].upper() + line[1:]
    module, _, function = COMMANDS[name].target.partition(":")
    return " ".join(_docstring(module, function).split("\n\n")[0].split())


def usage() -> str:
    """Every command with its one-line description."""
    names = [*LIGHTNING, *COMMANDS]
    width = max(map(len, names)) + 2
    lines = [f"usage: {PROG} <command> [flags]   (python -m seqrec <command> is the same)", "", "commands:"]
    lines += [f"  {name.ljust(width)}{summary_line(name)}" for name in names]
    lines += ["", f"{PROG} <command> --help shows a command's flags; --debug shows the traceback of a failure."]
    return "\n".join(lines)


# --- the parser of a typed function -------------------------------------------------------------------------
def _kind(annotation: Any) -> str:
    """"bool", "list" or "value": how a flag of this type is written."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _kind(args[0]) if len(args) == 1 else "value"
    if annotation is bool:
        return "bool"
    if typing.get_origin(annotation) in (list, tuple):
        return "list"
    return "value"


def describe(annotation: Any) -> str:
    """What a value of ``annotation`` looks like, for an error line."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(annotation)))
    if origin in (list, tuple):
        return "one or more values"
    if args and origin is not None:
        return " or ".join(describe(a) for a in args)
    return {int: "an integer", float: "a number", bool: "true or false", Path: "a path"}.get(annotation, "a string")


@dataclass
class Signature:
    """What the normalising pass needs of a function: its flags, their kinds and types, its positional parameters."""

    kinds: dict[str, str]
    types: dict[str, Any]
    positional: list[str]
    overrides: bool

    @classmethod
    def of(cls, function: Callable[..., Any]) -> Signature:
        """Read ``function``'s signature (annotations resolved)."""
        hints = typing.get_type_hints(function)
        kinds, types, positional, overrides = {}, {}, [], False
        for name, parameter in inspect.signature(function).parameters.items():
            if name == OVERRIDES:
                overrides = True
                continue
            types[name] = hints.get(name, str)
            kinds[name] = _kind(types[name])
            if parameter.default is inspect.Parameter.empty:
                positional.append(name)
        return cls(kinds, types, positional, overrides)


def _raw_description(formatter: type) -> type:
    """``formatter`` keeping the description's line breaks (its bullet lists)."""

    class Raw(formatter):  # type: ignore[misc, valid-type]
        def _fill_text(self, text: str, width: int, indent: str) -> str:
            return "".join(indent + line for line in text.splitlines(keepends=True))

    return Raw


def command_parser(name: str, function: Callable[..., Any]) -> Any:  # noqa: ANN401 (jsonargparse.ArgumentParser)
    """The parser of ``function``'s signature: positional parameters without a default, ``--flags`` for the rest."""
    import docstring_parser
    from jsonargparse import ArgumentParser, DefaultHelpFormatter

    doc = docstring_parser.parse(function.__doc__ or "")
    description = "\n\n".join(part for part in (doc.short_description, doc.long_description) if part)
    parser = ArgumentParser(prog=f"{PROG} {name}", description=description, exit_on_error=False, allow_abbrev=False,
                            formatter_class=_raw_description(DefaultHelpFormatter))
    parser.add_function_arguments(function, as_group=False, as_positional=True, skip={OVERRIDES})
    return parser


# --- old spellings and argparse-style forms -> the parser's ---------------------------------------------------
@dataclass
class Parsed:
    """The arguments as the parser takes them, the run's config flags, and the deprecation notes."""

    argv: list[str]
    overrides: list[str]
    notes: list[str]


def snake_case(flag: str) -> str:
    """``--kebab-case`` -> ``--kebab_case``: the spelling of every flag of the project (``seqrec`` and the benchmarks)."""
    return flag[:2] + flag[2:].replace("-", "_")


def new_flag(flag: str, command: Command, signature: Signature) -> tuple[str, str | None]:
    """(the flag's current spelling, a deprecation note or None)."""
    if flag in command.renamed:
        return command.renamed[flag], f"note: {flag} is now {command.renamed[flag]}"
    snake = snake_case(flag)
    if snake != flag and snake[2:] in signature.kinds and snake[2:] not in signature.positional:
        return snake, f"note: {flag} is now {snake}"
    return flag, None


def normalize(argv: list[str], command: Command, signature: Signature) -> Parsed:
    """Rewrite ``argv`` for the jsonargparse parser; split off the run's config flags.

    Old spellings become the new ones (one note each); a ``bool`` flag alone gets ``=true``; a list flag's values
    (space-separated or repeated) become one JSON list; a list positional takes every positional argument.
    """
    out, notes, overrides = [], [], []
    positional: list[int] = []  # where the positional arguments are in out
    lists: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--" and signature.overrides:
            overrides += argv[i:]
            break
        if not token.startswith("--") or token == "--help":
            out.append(token)
            if token not in ("-h", "--help"):
                positional.append(len(out) - 1)
            continue
        flag, has_value, value = token.partition("=")
        flag, note = new_flag(flag, command, signature)
        name = flag[2:]
        if name not in signature.kinds or name in signature.positional:
            if signature.overrides and command.overrides == "unknown":
                overrides.append(token)
                if not has_value and i < len(argv) and not argv[i].startswith("--"):
                    overrides.append(argv[i])
                    i += 1
            else:
                out.append(token)  # the parser names it
            continue
        if note and note not in notes:
            notes.append(note)
        kind = signature.kinds[name]
        if kind == "bool" and not has_value:
            if i < len(argv) and argv[i].lower() in BOOL_WORDS:
                value, i = argv[i], i + 1
            else:
                value = "true"
        elif kind == "list":
            values = [value] if has_value else []
            while not has_value and i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
            if len(values) == 1 and values[0].startswith("["):
                lists[name] = [*lists.get(name, []), *_parse_list(flag, values[0])]
            else:
                lists[name] = [*lists.get(name, []), *values]
            continue
        elif not has_value:
            if i >= len(argv):
                raise ValueError(f"{flag}: expected a value ({describe(signature.types[name])})")
            value, i = argv[i], i + 1
        out.append(f"{flag}={value}")
    out += [f"--{name}={json.dumps(values)}" for name, values in lists.items()]
    if signature.positional and signature.kinds[signature.positional[-1]] == "list":  # it takes the rest
        rest = positional[len(signature.positional) - 1:]
        if rest:
            out[rest[0]] = json.dumps([out[i] for i in rest])
            out = [token for i, token in enumerate(out) if i not in rest[1:]]
    return Parsed(out, overrides, notes)


def _parse_list(flag: str, text: str) -> list[str]:
    """A list written as JSON or YAML (``[a, b]``)."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = None
    if not isinstance(value, list):
        raise ValueError(f"{flag} {text}: expected one or more values (--flag a b, or --flag '[a, b]')")
    return [str(v) for v in value]


def parse_error(name: str, error: Exception, signature: Signature) -> ValueError:
    """jsonargparse's (several-line) parse error as one line naming the flag, what it takes and the help."""
    text = str(error)
    found = re.match(r'Parser key "([^"]+)":', text)
    if found and found.group(1) in signature.types:
        key = found.group(1)
        given = re.search(r"(?:Given value|Got value): (.*)$", text, re.MULTILINE)
        flag = key if key in signature.positional else f"--{key}"
        shown = f" {given.group(1).strip()}" if given else ""
        return ValueError(f"{flag}{shown}: expected {describe(signature.types[key])} (see {PROG} {name} --help)")
    return ValueError(f"{' '.join(text.split())} (see {PROG} {name} --help)")


def call(name: str, argv: list[str]) -> Any:  # noqa: ANN401 (what the command returns)
    """Parse ``argv`` against command ``name``'s function and call it (errors propagate; see ``main``)."""
    from jsonargparse import ArgumentError

    command = COMMANDS[name]
    function = command.function()
    signature = Signature.of(function)
    parsed = normalize(argv, command, signature)
    for note in parsed.notes:
        print(note, file=sys.stderr, flush=True)
    parser = command_parser(name, function)
    try:
        config = parser.parse_args(parsed.argv)
    except ArgumentError as error:
        raise parse_error(name, error, signature) from None
    kwargs = {key: config[key] for key in signature.kinds}
    if signature.overrides:
        kwargs[OVERRIDES] = parsed.overrides
    return function(**kwargs)


# --- the command line -----------------------------------------------------------------------------------------
def dispatch(argv: list[str]) -> Any:  # noqa: ANN401
    """Run ``argv[0]`` with the rest of ``argv``."""
    from seqrec.errors import run_command  # imports Lightning: not for --help

    command, rest = argv[0], argv[1:]
    if command in LIGHTNING:
        return importlib.import_module(LIGHTNING[command]).main(rest)
    if command == "bench":
        raise ValueError("the development benchmarks moved out of the package: from a source checkout's root run "
                         f"python -m benchmarks.<{'|'.join(BENCHMARKS)}> ...")
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; commands: {', '.join([*LIGHTNING, *COMMANDS])} "
                         f"({PROG} --help)")
    return run_command(lambda args: call(command, args), rest)


def main(argv: list[str] | None = None) -> Any:  # noqa: ANN401 (what the command returns: metrics, a summary, ...)
    """``seqrec <command> [flags]``: ``--help`` lists the commands; a failure is one line (exit 2 for bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return None
    if argv[0] in LIGHTNING or argv[0] in COMMANDS:
        return dispatch(argv)
    from seqrec.errors import run_command

    return run_command(dispatch, argv)


def script() -> None:
    """The ``seqrec`` console script: ``main``, exiting with a command's int status (summarize) or 0."""
    status = main()
    raise SystemExit(status if type(status) is int else 0)


def fit_script() -> None:
    """The ``seqrec-fit`` console script: ``seqrec fit``."""
    main(["fit", *sys.argv[1:]])
