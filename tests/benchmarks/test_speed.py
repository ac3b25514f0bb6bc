"""Speed benchmark: a smoke run of every part on the tiny ML-100k fixture (tiny models, 2 steps), the official
LRURec column only with ``--official_lrurec`` (a fake official ``model/lru.py`` here), the ML-1M rows skipped
without $SEQREC_SHARED_DATA."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import speed
from seqrec.bench.report import split_sections
from tests.conftest import write_ml100k

NUMBER = r"[\d,]+(?:\.\d+)?"
TABLES = ("### Arithmetic limit of this machine", "### Training step", "### Full-ranking validation",
          "### Side by side with the official LRURec code", "### Time to RecBole's 3-epoch SASRec figure")

# The official contract: LRU(args) with args.bert_hidden_units, .num_items, ...; forward(seqs) -> (scores (B, L, N+1), None).
FAKE_OFFICIAL = '''
import torch
from torch import nn


class LRU(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.token = nn.Embedding(args.num_items + 1, args.bert_hidden_units)
        self.mix = nn.Linear(args.bert_hidden_units, args.bert_hidden_units)
        self.bias = nn.Parameter(torch.zeros(args.num_items + 1))

    def forward(self, x, labels=None):
        h = torch.cumsum(self.mix(self.token(x)), dim=1)  # (B, L, d)
        return h @ self.token.weight.T + self.bias, None
'''


def _fixture(tmp_path: Path) -> str:
    """A source spec for an ML-100k-format fixture big enough for MLP4Rec's 100 frozen negatives."""
    root = write_ml100k(tmp_path / "ml-100k", num_users=80, num_items=130, length=20)
    return json.dumps({"class_path": "seqrec.data.sources.movielens.MovieLens100K", "init_args": {"root": str(root)}})


def _tiny(source: str, out: Path, *extra: str) -> list[str]:
    return [
        "--repeats", "2", "--steps", "2", "--warmup", "1", "--ml1m_data", source, "--ml100k_data", source,
        "--set", "model.init_args.net.init_args.d_model=16", "--set", "data.max_len=10",
        "--matmul_size", "32", "--loss_shape", "64x16x41", "--matmul_seconds", "0.005", "--fit_epochs", "1",
        "--out", str(out), "--bf16", "always", *extra,
    ]


def _body(out: Path) -> str:
    [(title, section)] = [(t, s) for t, s in split_sections(out.read_text())[1] if t == speed.TITLE]
    return section


def _rows(body: str, heading: str) -> list[list[str]]:
    """The data rows of the table under ``heading`` (cells stripped)."""
    part = body.split(heading, 1)[1].split("\n### ", 1)[0]
    lines = [line for line in part.splitlines() if line.startswith("|")][2:]  # drop header and rule
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]


def _positive_numbers(cells: list[str]) -> list[float]:
    """Every number in the cells (medians and spreads); all must be > 0."""
    values = [float(v.replace(",", "")) for cell in cells for v in re.findall(NUMBER, cell)]
    assert values and all(v > 0 for v in values), cells
    return values


@pytest.mark.slow  # a benchmark smoke run (forked phases)
def test_speed_smoke_every_table_with_the_official_code(tmp_path: Path) -> None:
    official = tmp_path / "official" / "model"
    official.mkdir(parents=True)
    (official / "lru.py").write_text(FAKE_OFFICIAL)
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\n## Other\n\nkept\n")
    speed.main(_tiny(_fixture(tmp_path), out, "--official_lrurec", str(official.parent)))

    text = out.read_text()
    assert "## Other\n\nkept" in text  # other sections survive
    body = _body(out)
    assert "python -m benchmarks.speed --repeats 2" in body
    assert "at start" in body and "at end" in body and "torch " in body
    assert "80 users, 130 items" in body  # the fixture, not the real data
    for heading in TABLES:
        assert heading in body, heading

    matmul = _rows(body, TABLES[0])
    assert [r[0] for r in matmul] == ["large square", "next-item loss"]
    for row in matmul:
        _positive_numbers(row[2:])

    train = _rows(body, TABLES[1])
    assert [(r[0], r[2]) for r in train] == [(m, p) for m in ("SASRec", "LRURec", "BERT4Rec", "MLP4Rec")
                                             for p in ("fp32", "bf16-mixed")]
    for row in train:
        _positive_numbers(row[3:])  # batch × L, ms, samples/s, tokens/s, RSS, MACs, limit, ratio
    checks = re.findall(rf"fused loss ({NUMBER}) G MACs (=|≠) plain loss ({NUMBER})", body)
    assert len(checks) == 4 and all(sign == "=" for _, sign, _ in checks), checks  # FlopCounterMode sees the fused loss

    evaluation = _rows(body, TABLES[2])
    assert [r[0] for r in evaluation] == ["LRURec", "SASRec", "BERT4Rec"]
    for row in evaluation:
        _positive_numbers(row[2:])

    side = _rows(body, TABLES[3])
    assert [r[0] for r in side][:3] == ["training step, ms", "training peak RSS MiB", "validation pass (80 users), s"]
    for row in side[:3]:
        _positive_numbers(row[1:])
    assert "bert_hidden_units=16" in body and "num_items=130" in body  # sized from our config and data

    fit = _rows(body, TABLES[4])
    assert [r[0] for r in fit] == ["wall time of fit + test, s", "test NDCG@10"]
    for row in fit:
        _positive_numbers(row[1:])
    assert re.search(r"Target ≤ 0\.05 × 333 s: time (met|not met) .* RecBole.s figure is (matched|not matched)", body)


@pytest.mark.slow  # a benchmark smoke run (forked phases)
def test_speed_without_shared_data_nor_lrurec_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SEQREC_SHARED_DATA", raising=False)
    out = tmp_path / "BENCHMARKS.md"
    source = _fixture(tmp_path)
    argv = _tiny(source, out, "--parts", "train,eval")
    argv[argv.index("--ml1m_data") + 1] = "ml-1m-lrurec"  # the default preset, which needs the shared folder
    speed.main(argv)
    body = _body(out)
    err = capsys.readouterr().err
    for text in (err, body):
        assert "SASRec training" in text and "LRURec training" in text and "SEQREC_SHARED_DATA" in text
    assert "official" not in body.lower()  # no official column without --official_lrurec
    assert "### Full-ranking validation" not in body  # ML-1M only
    train = _rows(body, "### Training step")
    assert [(r[0], r[2]) for r in train] == [("MLP4Rec", "fp32"), ("MLP4Rec", "bf16-mixed")]  # ML-100k rows still run
    for row in train:
        _positive_numbers(row[3:])


def test_speed_arguments_fail_early(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="model/lru.py"):
        speed.main(["--official_lrurec", str(tmp_path), "--parts", "matmul"])
    with pytest.raises(SystemExit, match="--parts"):
        speed.main(["--parts", "matmul,nonsense"])
    with pytest.raises(SystemExit):
        speed.main(["--set", "no-equals-sign"])


@pytest.mark.slow  # a benchmark smoke run (forked phases)
def test_models_restricts_the_training_and_validation_rows(tmp_path: Path) -> None:
    out = tmp_path / "speed.md"
    speed.main(_tiny(_fixture(tmp_path), out, "--parts", "train,eval", "--models", "BERT4Rec,SASRec"))
    body = _body(out)
    assert [(r[0], r[2]) for r in _rows(body, TABLES[1])] == [(m, p) for m in ("SASRec", "BERT4Rec")
                                                              for p in ("fp32", "bf16-mixed")]
    assert [r[0] for r in _rows(body, TABLES[2])] == ["SASRec", "BERT4Rec"]


def test_bf16_rows_are_timed_only_where_bf16_products_are_not_slower_than_fp32(monkeypatch) -> None:
    def rates(fp32: float, bf16: float) -> dict:
        return {"gmacs_per_s": {"large square/float32": [fp32], "large square/bfloat16": [bf16]}}

    monkeypatch.setattr(speed, "bf16_native", lambda: False)
    reason = speed.bf16_unsuited(rates(40.0, 0.8))  # an AVX2-only CPU: bf16 emulated
    assert reason is not None and "0.02× its fp32 rate" in reason and "avx512_bf16" in reason
    assert speed.bf16_unsuited(None) is not None  # no matmul phase: the flags decide
    monkeypatch.setattr(speed, "bf16_native", lambda: True)
    assert speed.bf16_unsuited(rates(90.0, 577.0)) is None  # AMX: bf16 6x faster
    assert speed.bf16_unsuited(None) is None


def test_the_report_names_the_data_and_official_folders_by_their_variables(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEQREC_SHARED_DATA", str(tmp_path / "shared"))
    monkeypatch.setenv("SEQREC_LRUREC_OFFICIAL", str(tmp_path / "official") + "/")
    text = f"read {tmp_path}/shared/lrurec/ml-1m.txt.gz and `{tmp_path}/official/model/lru.py`"
    assert speed.name_env_paths(text) == ("read $SEQREC_SHARED_DATA/lrurec/ml-1m.txt.gz and "
                                          "`$SEQREC_LRUREC_OFFICIAL/model/lru.py`")
