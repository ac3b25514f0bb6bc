"""How hard is each leave-last-out query? Validation vs test targets of a SASRec/LRURec text file, model-free.

A model selected on the second-to-last item and tested on the last one can test lower than it validates because
the last items are harder, not because of the model. This measures it from the data alone, for each split (the
validation target is ``items[-2]`` with ``items[:-2]`` as history, the test target ``items[-1]`` with
``items[:-1]``; users with fewer than 3 events have no query, as in LRURec's loader):

- the target's count among the training events (``items[:-2]`` of every user; all items of users without
  queries), its median and the share of targets seen fewer than ``--cold`` times;
- the share of targets that are in the history (masked inputs, a guaranteed miss under LRURec's masking);
- Recall@10 of the popularity ranker: the 10 most frequent training items not in the input window (the newest
  ``--max_len`` items), the same for every user; a difficulty scale no model choice moves.

Usage: ``python -m benchmarks.split_difficulty FILE.txt[.gz] [--max_len 50] [--out results/SPLIT_DIFFICULTY.md]``
(written atomically; several files give one table).
"""

from __future__ import annotations

import collections
import gzip
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.flags import Parser
from seqrec.atomic import write_text
from seqrec.bench.report import shown_command


@dataclass
class Split:
    """Statistics of one split's targets (module docstring)."""

    data: str
    split: str
    queries: int
    median_count: float
    cold: float  # share of targets with a training count below the threshold
    in_history: float
    popularity_recall10: float


def read_sequences(path: Path) -> list[list[str]]:
    """Users' items in file order from ``user item`` lines (gzip or plain)."""
    sequences: dict[str, list[str]] = collections.defaultdict(list)
    with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if len(fields) < 2:
                raise ValueError(f"{path}:{number}: expected 'user item', got {line.strip()!r}")
            sequences[fields[0]].append(fields[1])
    return list(sequences.values())


def difficulty(sequences: list[list[str]], data: str, max_len: int = 50, cold: int = 5, k: int = 10) -> list[Split]:
    """The validation and test rows of one dataset (module docstring)."""
    queries = [s for s in sequences if len(s) >= 3]
    counts = collections.Counter(i for s in queries for i in s[:-2])
    for s in sequences:
        if len(s) < 3:
            counts.update(s)
    ranked = [item for item, _ in counts.most_common(k + max_len)]  # enough to fill k after masking a window
    out = []
    for split, end in (("validation", -2), ("test", -1)):
        target_counts, hits, seen = [], 0, 0
        for s in queries:
            target, history = s[end], s[:end]
            window = set(history[-max_len:])
            target_counts.append(counts[target])
            seen += target in set(history)
            hits += target in [item for item in ranked if item not in window][:k]
        n = len(queries)
        array = np.array(target_counts)
        out.append(Split(data, split, n, float(np.median(array)), float((array < cold).mean()), seen / n, hits / n))
    return out


def report(rows: list[Split], command: str, cold: int) -> str:
    """A markdown table, validation and test side by side per dataset, and the test/validation ratios."""
    lines = ["# How hard is the last item? Validation vs test targets, from the data alone", "",
             f"Command: `{command}`", "",
             f"| data | split | queries | target's training count, median | targets seen < {cold} times | "
             "target in its history | popularity Recall@10 |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.data} | {r.split} | {r.queries:,} | {r.median_count:g} | {r.cold:.1%} | {r.in_history:.2%} | "
                     f"{r.popularity_recall10:.4f} |")
    lines.append("")
    for val, test in zip(rows[::2], rows[1::2]):
        lines.append(f"- {val.data}: test / validation popularity Recall@10 = {test.popularity_recall10 / val.popularity_recall10:.2f}; "
                     f"cold targets {val.cold:.1%} → {test.cold:.1%}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    p = Parser("benchmarks.split_difficulty", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path, help="SASRec/LRURec text files (user item per line, time order)")
    p.add_argument("--max_len", type=int, default=50, help="input window masked from the popularity ranker (50)")
    p.add_argument("--cold", type=int, default=5, help="a target seen fewer times in training is cold (5)")
    p.add_argument("--out", type=Path, help="also write the report here (atomically)")
    args = p.parse_args(argv)
    rows = []
    for path in args.files:
        name = path.name.split(".")[0]
        rows += difficulty(read_sequences(path), name, args.max_len, args.cold)
    command = shown_command("benchmarks.split_difficulty", [*map(str, args.files), "--max_len", str(args.max_len)])
    text = report(rows, command, args.cold)
    if args.out:
        write_text(args.out, text)
    sys.stdout.write(text)
    return text


if __name__ == "__main__":
    main()
