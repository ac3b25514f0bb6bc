"""The benchmarks' command lines, spelled as ``seqrec``'s: ``--snake_case`` flags, one-line errors.

The benchmarks keep argparse (their flags are plain options, with no typed entry point for ``seqrec.cli`` to read),
but they say things the same way as the package's commands: a flag is ``--runs_dir``, not ``--runs-dir``; an old
``--kebab-case`` spelling of a flag still parses, with one line ``note: --runs-dir is now --runs_dir`` (the results
files quote commands recorded before the change), and so does a flag a benchmark renamed (``renamed``, as
``seqrec``'s ``Command.renamed``); a flag whose meaning changed is refused with the fix (``retired``); an abbreviated
flag is refused, as ``seqrec``'s are; a bad command line is one line ``error: ...`` naming the help.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from seqrec.bench.report import shown_command
from seqrec.cli import snake_case


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` for ``python -m <module>``: old kebab-case spellings respelled, one-line errors."""

    def __init__(self, module: str, renamed: dict[str, str] | None = None, retired: dict[str, str] | None = None,
                 **kwargs: Any) -> None:  # noqa: ANN401 (argparse's keywords)
        """``renamed``: old flag -> its new name (same value); ``retired``: old flag -> what to give instead."""
        kwargs.setdefault("prog", f"python -m {module}")
        kwargs.setdefault("allow_abbrev", False)  # as seqrec's commands: --runs is an error, not --runs_dir
        super().__init__(**kwargs)
        self.module = module
        self.renamed = renamed or {}
        self.retired = retired or {}
        self.given: list[str] = []  # the arguments last parsed, respelled

    def respell(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with every ``--kebab-case`` flag this parser knows as ``--kebab_case``, and every renamed flag,
        respelled (one note each); a retired flag is an error naming its replacement.

        Only flags: a value, and everything after a bare ``--``, stay as written.
        """
        out: list[str] = []
        notes: list[str] = []
        for i, token in enumerate(argv):
            if token == "--":
                out += argv[i:]
                break
            flag, equals, value = token.partition("=")
            snake = snake_case(flag)
            if snake in self.retired:
                self.error(f"{flag} is no longer a flag: {self.retired[snake]}")
            snake = self.renamed.get(snake, snake)
            if flag.startswith("--") and flag not in self._option_string_actions and snake in self._option_string_actions:
                note = f"note: {flag} is now {snake}"
                if note not in notes:
                    notes.append(note)
                    print(note, file=sys.stderr, flush=True)
                token = snake + equals + value
            out.append(token)
        return out

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        """argparse's, over the respelled arguments (``parse_args`` calls this)."""
        self.given = self.respell(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self.given, namespace)

    def command(self, *extra: str) -> str:
        """The command line last parsed (and ``extra`` arguments), in today's spelling, as a results file quotes it."""
        return shown_command(self.module, [*self.given, *extra])

    def error(self, message: str) -> NoReturn:
        """One line, ``error: <what was wrong> (see <prog> --help)``, exit status 2 (argparse's)."""
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")
