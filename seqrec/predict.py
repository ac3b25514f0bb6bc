"""``seqrec predict RUN [--users all|test|FILE] [--k 10] [--out top10.csv]``: top-k items per user, in your ids.

RUN is a run directory (``runs/<experiment>/version_N``), its experiment folder (the newest version) or a
checkpoint. The run is rebuilt from its ``config.yaml`` through ``seqrec.build`` (the same data, ids and
model; nothing is written to the run directory) and the weights of ``--ckpt_path`` (default: the best) are
loaded. The output (Parquet, CSV or TSV, by the name; ``.gz`` allowed for text) has one row per
recommendation: ``user, rank, item, score`` in the data's own ids.

- ``--users all`` (default): every user of the data, from their whole history (the next item after it);
  ``--users FILE``: the users listed in FILE (a ``user`` column, or one id per line);
  ``--users test``: the test queries of the run's split, from exactly the history the evaluation gave the
  model (each user's test target held out), so HR@k computed from the file equals the run's ``test/hr@k``.
- ``--exclude_seen``: ``all`` never recommends an item of the user's history (default, except for ``test``),
  ``window`` masks the newest ``max_len`` items only (what the evaluation masks: the default for ``test``
  when the task masks history), ``none`` masks nothing.
- ``--candidates FILE``: rank only these items (an ``item`` column, or one id per line), or, with ``user``
  and ``item`` columns, only each user's own candidates.
- Ranking is the evaluation's: ``rank`` = 1 + the number of items scored strictly higher (ties share a
  rank, as the metrics count them); ``--ties all`` (default) keeps every item with rank <= k, so a user
  has more than k rows only where items tie with the k-th score; ``--ties cut`` gives exactly k (ties to the
  item listed first in the data's id order).

Users are scored in chunks of ``--batch_size`` (default: the run's evaluation batch size) and the catalogue
in item chunks with a running top-k, so memory stays bounded whatever the number of users and items (no
users x items matrix); rows are written as each chunk finishes. Any other ``--section.key value`` flag
overrides the run's config (e.g. ``--data.source.path`` when the data file moved; the data must be the same).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqrec.api import Exclude, Ties, TrainedRun, flat_spans, load_run
from seqrec.atomic import atomic_write
from seqrec.cli import main as cli_main
from seqrec.data.sources.interactions_file import detect_format, reading
from seqrec.data.table import Where, input_error, stripped_ids
from seqrec.errors import one_line

log = logging.getLogger("seqrec.predict")
TRIM_EVERY = 32  # chunks between returns of freed heap pages to the OS (each return costs page faults after it)
OUTPUT_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "tsv"}


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where there is none."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_free_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim``; nothing elsewhere).

    Each chunk allocates and frees score buffers of tens of MB; glibc raises its mmap threshold after the
    first such free and then keeps the freed heap pages, so without this the peak RSS creeps up chunk by
    chunk although the live memory stays constant (100k users x 10k items: 1.2 GB instead of 0.65 GB).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


# --- id files -------------------------------------------------------------------------------------------
def read_id_columns(path: str | Path, wanted: list[str]) -> tuple[dict[str, np.ndarray], Where]:
    """The ``wanted`` columns of an id file (Parquet, CSV, TSV; gz allowed) as str arrays.

    A file with one column and none of the wanted names is read as one id per line, without a header
    (unless its first line is the first wanted name), and gives the first wanted column. Missing optional
    columns (all but the first) are absent from the result.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file of ids")
    with reading(path):
        return _read_id_columns(path, wanted)


def _read_id_columns(path: Path, wanted: list[str]) -> tuple[dict[str, np.ndarray], Where]:
    """``read_id_columns`` of an existing file (its reads may raise OSError)."""
    import pyarrow as pa
    from pyarrow import csv as pa_csv

    kind, gz = detect_format(path)
    if kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(str(path))
        where = Where(str(path))
    else:
        if path.stat().st_size == 0:
            raise ValueError(f"{path}: the file is empty; expected one id per line or a {wanted[0]!r} column")
        stream = lambda: pa.input_stream(str(path), compression="gzip" if gz else None)  # noqa: E731
        parse = pa_csv.ParseOptions(delimiter="\t" if kind == "tsv" else ",")
        names = pa_csv.open_csv(stream(), parse_options=parse).schema.names
        header = any(name in names for name in wanted) or len(names) > 1
        read = pa_csv.ReadOptions(autogenerate_column_names=not header)
        table = pa_csv.read_csv(stream(), read_options=read, parse_options=parse,
                                convert_options=pa_csv.ConvertOptions(column_types={n: pa.string() for n in names}
                                                                      if header else {"f0": pa.string()}))
        where = Where(str(path), first_line=2 if header else 1)
    columns = {name: table.column(name) for name in wanted if name in table.column_names}
    if not columns:
        if table.num_columns != 1:
            raise input_error(where, wanted[0], None, f"no such column; the columns are {table.column_names}",
                              f"name the column {wanted[0]!r} or give one id per line")
        columns = {wanted[0]: table.column(0)}
    if wanted[0] not in columns:
        raise input_error(where, wanted[0], None, f"no such column; the columns are {table.column_names}")
    out = {}
    for name, column in columns.items():
        if column.null_count:
            bad = int(pa.compute.index(column.is_null(), True).as_py())
            raise input_error(where, name, bad, "empty value")
        text = stripped_ids(column.cast(pa.string()), where, name)
        out[name] = np.asarray(text.to_numpy(zero_copy_only=False)).astype(str)
    if len(out[wanted[0]]) == 0:
        raise ValueError(f"{path}: no ids in the file")
    return out, where


def _rows_of(ids: np.ndarray, lookup: np.ndarray, where: Where, column: str, what: str, skip: bool) -> np.ndarray:
    """Keep-mask of ids the data knows; a one-line error at the first unknown one unless ``skip``."""
    known = lookup >= (1 if what == "item" else 0)
    if not known.all():
        bad = int(np.flatnonzero(~known)[0])
        if not skip:
            raise input_error(where, column, bad, f"unknown {what} {str(ids[bad])!r} (not in the run's data; "
                              f"{int((~known).sum())} unknown in all)", "remove it or pass --skip_unknown")
        log.warning("%s: %d unknown %s ids skipped", where.name, int((~known).sum()), what)
    return known


# --- queries ------------------------------------------------------------------------------------------
def select_queries(trained: TrainedRun, users: str, skip_unknown: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user rows, history starts, history stops) of the queries: every user, the test queries, or a file's users."""
    sequences = trained.sequences
    if users == "all":
        rows = np.arange(sequences.num_users)
        return rows, sequences.indptr[:-1].copy(), sequences.indptr[1:].copy()
    if users == "test":
        test = trained.datamodule.split.test
        if len(np.unique(test.user)) != len(test.user):
            raise ValueError(
                f"--users test: the run's split has several test queries per user ({len(test.user)} queries, "
                f"{len(np.unique(test.user))} users; a temporal split); predict takes one query per user: use "
                "--users all or a file of users"
            )
        return test.user.astype(np.int64), test.start.astype(np.int64), test.stop.astype(np.int64)
    ids, where = read_id_columns(users, ["user"])
    found = trained.user_rows(ids["user"])
    rows = found[_rows_of(ids["user"], found, where, "user", "user", skip_unknown)]
    return rows, sequences.indptr[rows], sequences.indptr[rows + 1]


def read_candidates(
    trained: TrainedRun, path: str, skip_unknown: bool
) -> tuple[torch.Tensor | None, tuple[np.ndarray, np.ndarray] | None]:
    """(a global (N + 1,) item mask, or per-user CSR candidates (indptr over user rows, items))."""
    columns, where = read_id_columns(path, ["item", "user"])
    items = trained.item_rows(columns["item"])
    keep = _rows_of(columns["item"], items, where, "item", "item", skip_unknown)
    if "user" not in columns:
        mask = torch.zeros(trained.net.num_items + 1, dtype=torch.bool, device=trained.device)
        mask[torch.from_numpy(items[keep]).to(trained.device)] = True
        return mask, None
    users = trained.user_rows(columns["user"])
    keep &= _rows_of(columns["user"], users, where, "user", "user", skip_unknown)
    users, items = users[keep], items[keep]
    order = np.lexsort((items, users))
    users, items = users[order], items[order]
    indptr = np.zeros(trained.sequences.num_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(users, minlength=trained.sequences.num_users), out=indptr[1:])
    return None, (indptr, items)


# --- output --------------------------------------------------------------------------------------------
class OutputError(ValueError):
    """``--out`` could not be written (a read-only or full disk, a missing folder); the previous file is kept."""

    def __init__(self, out: Path, error: OSError) -> None:
        code = error.errno
        text = str(error)
        if code is None and "errno 28" in text.lower():  # pyarrow's writers report the errno in the text only
            code = errno.ENOSPC
        reason = {errno.ENOSPC: "the disk is full", getattr(errno, "EDQUOT", errno.ENOSPC): "the disk quota is full",
                  errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
                  errno.EPERM: "permission denied"}.get(code or -1) or " ".join((error.strerror or text).split())
        kept = "the previous file is kept" if out.exists() else "nothing was written"
        super().__init__(f"--out {out}: cannot write it ({reason}); {kept}. Free space, or pass --out a path in a "
                         "writable folder")


def output_schema(trained: TrainedRun):  # noqa: ANN201 (pyarrow schema)
    """``user, rank, item, score``; ids typed as the data's (int64 or string)."""
    import pyarrow as pa

    kinds = trained.sequences.id_kinds or ("str", "str")
    typed = {"int": pa.int64(), "str": pa.string()}
    return pa.schema([("user", typed[kinds[0]]), ("rank", pa.int32()), ("item", typed[kinds[1]]), ("score", pa.float32())])


class RowWriter:
    """Writes record batches to a Parquet, CSV or TSV file (``.gz`` for text), chunk by chunk."""

    def __init__(self, path: str, schema: Any, out_name: Path) -> None:  # noqa: ANN401 (pyarrow schema)
        import pyarrow as pa

        suffixes = [s.lower() for s in out_name.suffixes]
        gz = bool(suffixes) and suffixes[-1] == ".gz"
        kind = OUTPUT_FORMATS.get(suffixes[-2] if gz and len(suffixes) > 1 else (suffixes[-1] if suffixes else ""))
        if kind is None or (gz and kind == "parquet"):
            raise ValueError(f"--out {out_name}: name a .parquet, .csv, .tsv, .csv.gz or .tsv.gz file")
        self.kind = kind
        if kind == "parquet":
            import pyarrow.parquet as pq

            self.writer = pq.ParquetWriter(path, schema)
            self.sink = None
        else:
            from pyarrow import csv as pa_csv

            self.sink = pa.output_stream(path, compression="gzip" if gz else None)
            options = pa_csv.WriteOptions(delimiter="\t" if kind == "tsv" else ",", quoting_style="needed")
            self.writer = pa_csv.CSVWriter(self.sink, schema, write_options=options)

    def write(self, table: Any) -> None:  # noqa: ANN401
        """Append rows."""
        self.writer.write_table(table)

    def close(self) -> None:
        """Finish the file."""
        self.writer.close()
        if self.sink is not None:
            self.sink.close()


def chunk_table(trained: TrainedRun, schema: Any, user_rows: np.ndarray, top: Any) -> Any:  # noqa: ANN401
    """The rows of one chunk of queries (in query order, then rank order)."""
    import pyarrow as pa

    valid = top.valid.cpu().numpy()
    counts = valid.sum(axis=1)
    sequences = trained.sequences
    users = sequences.raw_user_ids(np.repeat(user_rows, counts))
    items = sequences.raw_item_ids(top.items.cpu().numpy()[valid])
    return pa.table(
        [pa.array(users), pa.array(top.ranks.cpu().numpy()[valid].astype(np.int32)), pa.array(items),
         pa.array(top.scores.float().cpu().numpy()[valid].astype(np.float32))],
        schema=schema,
    )


def predict(
    trained: TrainedRun,
    out: Path,
    users: str = "all",
    k: int = 10,
    exclude_seen: Exclude | None = None,
    candidates: str | None = None,
    ties: str = "all",
    batch_size: int | None = None,
    skip_unknown: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Write the top-k of the chosen users to ``out`` (atomically); return what was written and how long it took.

    batch_size: users scored at once (default: the run's ``eval_batch_size``, so ``--users test`` scores exactly the
    batches the evaluation scored).
    """
    from tqdm import tqdm

    batch_size = batch_size or trained.eval_batch_size
    if k < 1 or batch_size < 1:
        raise ValueError(f"--k and --batch_size must be >= 1, got {k} and {batch_size}")
    if exclude_seen is None:
        exclude_seen = ("window" if trained.mask_history else "none") if users == "test" else "all"
    started = time.perf_counter()
    rows, starts, stops = select_queries(trained, users, skip_unknown)
    allowed, per_user = read_candidates(trained, candidates, skip_unknown) if candidates else (None, None)
    schema = output_schema(trained)
    written = {"rows": 0}

    def write(tmp: str) -> None:
        writer = RowWriter(tmp, schema, out)
        try:
            disable = None if progress is None else not progress  # None: a bar on a terminal only
            bar = tqdm(total=len(rows), unit="user", desc="predict", disable=disable, file=sys.stderr, mininterval=1.0)
            for first in range(0, len(rows), batch_size):
                part = slice(first, first + batch_size)
                pairs = None
                if per_user is not None:
                    indptr, items = per_user
                    r, offsets = flat_spans(indptr[rows[part]], indptr[rows[part] + 1])
                    pairs = (r, items[offsets])
                top = trained.rank_spans(starts[part], stops[part], k, exclude_seen, allowed, pairs, ties)
                table = chunk_table(trained, schema, rows[part], top)
                writer.write(table)
                written["rows"] += table.num_rows
                bar.update(len(rows[part]))
                if (first // batch_size) % TRIM_EVERY == TRIM_EVERY - 1:
                    release_free_memory()  # keeps the peak RSS flat over any number of chunks
            bar.close()
        finally:
            writer.close()

    try:
        atomic_write(out, write)
    except OSError as error:
        raise OutputError(out, error) from None
    seconds = time.perf_counter() - started
    summary = {"out": str(out), "users": int(len(rows)), "rows": written["rows"], "k": k, "exclude_seen": exclude_seen,
               "ties": ties, "seconds": round(seconds, 3), "users_per_s": round(len(rows) / max(seconds, 1e-9), 1)}
    log.info("wrote %d rows for %d users to %s in %.1f s (%.0f users/s)", summary["rows"], summary["users"], out,
             seconds, summary["users_per_s"])
    return summary


def command(
    run: str,
    ckpt_path: str = "best",
    users: str = "all",
    k: int = 10,
    exclude_seen: Exclude | None = None,
    candidates: str | None = None,
    ties: Ties = "all",
    out: str | None = None,
    batch_size: int | None = None,
    device: str = "cpu",
    threads: int | None = None,
    skip_unknown: bool = False,
    no_progress: bool = False,
    overrides: list[str] | None = None,
) -> dict[str, Any]:
    """Top-k items per user of a trained run, in the data's own ids, to a Parquet, CSV or TSV file.

    One row per recommendation: user, rank, item, score; rank = 1 + the items scored strictly higher (the
    evaluation's ranking, ties included). Any other --section.key value flag overrides the run's config (e.g.
    --data.source.path when the data file moved). A missing, moved or broken run, checkpoint or data file, bad
    input and an output that cannot be written are one line, exit 2.

    Args:
        run: run directory (runs/<experiment>/version_N), its experiment folder (the newest version), or a checkpoint
        ckpt_path: best, last, or a .ckpt path
        users: all (every user, from their whole history), test (the split's test queries: HR@k from the file equals
            the run's test/hr@k), or a file of user ids (a user column, or one id per line)
        k: items per user
        exclude_seen: items of the history never recommended: all (default), window (the newest max_len items; the
            default for --users test when the task masks history), none
        candidates: rank only these items: a file with an item column (or one id per line), or user and item columns
        ties: all: every item with rank <= k; cut: exactly k (ties to the item first in the data's id order)
        out: output .parquet/.csv/.tsv(.gz) (default RUN/predictions.parquet)
        batch_size: users scored at once (default: the run's eval_batch_size; memory ~ batch x item chunk)
        device: cpu, cuda, or auto
        threads: torch threads (default: the cores available)
        skip_unknown: skip ids the data does not know instead of failing
        no_progress: no progress bar
        overrides: the run's config flags (--section.key value)
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    overrides = list(overrides or [])
    if overrides and not overrides[0].startswith("--"):
        raise ValueError(f"unexpected argument {overrides[0]!r} (config overrides are --section.key value)")
    try:
        trained = load_run(run, ckpt_path, device, overrides, threads)
        path = Path(out) if out else trained.run_dir / "predictions.parquet"
        return predict(trained, path, users, k, exclude_seen, candidates, ties, batch_size, skip_unknown,
                       False if no_progress else None)
    except (OSError, KeyError, ImportError) as error:  # a missing or broken file, a bad key: one line, exit 2
        raise ValueError(one_line(error)) from error


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``seqrec predict`` (``seqrec.cli``): parse, load the run, write the predictions; failures are one line."""
    return cli_main(["predict", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
