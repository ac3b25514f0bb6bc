"""The network's old name (``model`` inside the task, now ``net``): old flags, config files, run directories and
checkpoints load as the new ones, each with one note."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

import seqrec
from seqrec import renamed_keys
from seqrec.__main__ import main
from seqrec.build import resolved_dict
from seqrec.config_files import resolve_config
from seqrec.models.next_item.sasrec import SASRec
from seqrec.renamed_keys import rename_config, rename_flag
from seqrec.runs import CONFIG
from seqrec.tasks.next_item import NextItemTask


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch):
    """Each test sees the notes a fresh process would print."""
    monkeypatch.setattr(renamed_keys, "_noted", set())


def notes(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]


def old_spelling(new: Path, old: Path) -> Path:
    """A config file written the old way: the task's ``net`` renamed back to ``model`` (nothing else changed)."""
    text = new.read_text()
    old_text = re.sub(r"^    net:", "    model:", text, flags=re.M)
    assert old_text != text
    old.write_text(old_text)
    return old


def test_flags_rename_only_the_tasks_network():
    assert rename_flag("--model.model.d_model") == "--model.net.d_model"
    assert rename_flag("--model.init_args.model.init_args.dropout=0.3") == "--model.init_args.net.init_args.dropout=0.3"
    assert rename_flag("--model.model") == "--model.net"
    for unchanged in ("--model.net.d_model", "--model.lr", "--model.models", "--data.model", "--modelx.model.d", "x"):
        assert rename_flag(unchanged) == unchanged


def test_config_documents_rename_under_init_args_or_beside_class_path():
    nested = {"model": {"class_path": "T", "init_args": {"model": {"class_path": "N"}, "lr": 0.1}}}
    assert rename_config(nested) == "model.init_args.model"
    assert nested["model"]["init_args"] == {"net": {"class_path": "N"}, "lr": 0.1}
    flat = {"model": {"model": {"class_path": "N"}}}
    assert rename_config(flat) == "model.model" and flat == {"model": {"net": {"class_path": "N"}}}
    for unchanged in ({"model": {"init_args": {"net": {}}}}, {"data": {"model": 1}}, {"model": "x"}, None, [1]):
        assert rename_config(unchanged) is None


def test_old_flags_resolve_as_the_new_ones_with_one_note_each(capsys):
    new = resolved_dict(["--config", "sasrec_ml1m", "--model.net.d_model", "32", "--model.net.dropout", "0.3"])
    capsys.readouterr()
    old = resolved_dict(["--config", "sasrec_ml1m", "--model.model.d_model", "32",
                         "--model.init_args.model.init_args.dropout=0.3", "--model.model.d_model", "32"])
    assert old == new and new["model"]["init_args"]["net"]["init_args"]["d_model"] == 32
    assert notes(capsys) == ["note: --model.model.d_model is now --model.net.d_model",
                             "note: --model.init_args.model.init_args.dropout is now "
                             "--model.init_args.net.init_args.dropout"]


def test_an_old_config_file_resolves_as_the_new_one_and_is_left_as_it_was(tmp_path, capsys):
    part = Path(resolve_config("model/sasrec.yaml"))
    old = old_spelling(part, tmp_path / "sasrec_old.yaml")
    before = old.read_text()
    new = resolved_dict(["--config", "sasrec_ml1m", "--config", str(part)])
    capsys.readouterr()
    assert resolved_dict(["--config", "sasrec_ml1m", "--config", str(old)]) == new
    assert old.read_text() == before
    assert notes(capsys) == [f"note: {old}: model.init_args.model is now model.init_args.net "
                             "(read with the new key; the file is unchanged)"]


def test_a_checkpoint_with_the_old_keys_loads_as_net():
    task = NextItemTask(SASRec(num_items=20, max_len=8, d_model=16, num_blocks=1, num_heads=1))
    old = {(f"model.{k[4:]}" if k.startswith("net.") else k): v + 1 for k, v in task.state_dict().items()}
    assert all(k.startswith("model.") for k in old)
    fresh = NextItemTask(SASRec(num_items=20, max_len=8, d_model=16, num_blocks=1, num_heads=1))
    fresh.load_state_dict(old)  # strict: every key matched
    assert all(torch.equal(fresh.state_dict()[f"net.{k[6:]}"], v) for k, v in old.items())


def to_old_run(run_dir: Path) -> None:
    """Rewrite a run directory as the code before the rename wrote it: config.yaml and every checkpoint."""
    old_spelling(run_dir / CONFIG, run_dir / CONFIG)
    for ckpt in (run_dir / "checkpoints").glob("*.ckpt"):
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        state["state_dict"] = {f"model.{k[4:]}": v for k, v in state["state_dict"].items()}
        torch.save(state, ckpt)


def test_a_run_written_before_the_rename_loads_recommends_and_resumes(tiny_fit, tmp_path, capsys):
    runs = tmp_path / "runs"
    main(["fit", *tiny_fit(runs, "--trainer.max_epochs", "1", "--test", "false")])
    [run_dir] = list(runs.glob("*/version_0"))
    users = [1, 2, 3]
    expected = seqrec.load_run(run_dir, checkpoint="last", threads=1).recommend_users(users, k=5)
    to_old_run(run_dir)
    assert "    model:" in (run_dir / CONFIG).read_text()
    capsys.readouterr()
    old = seqrec.load_run(run_dir, checkpoint="last", threads=1)
    assert old.recommend_users(users, k=5) == expected
    said = notes(capsys)
    assert any("model.init_args.model is now model.init_args.net" in n for n in said)
    assert "note: a checkpoint written before the network was renamed: its model.* weights load as net.*" in said
    # a second sitting continues the old run (its saved config compares equal under the new key)
    main(["fit", *tiny_fit(runs, "--trainer.max_epochs", "2", "--test", "false", "--ckpt_path", "last")])
    assert not (runs / run_dir.parent.name / "version_1").exists()
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["epoch"] == 1 and all(k.startswith("net.") for k in last["state_dict"])


def test_the_python_apis_old_attribute_is_the_network(tiny_fit, tmp_path, capsys):
    runs = tmp_path / "runs"
    main(["fit", *tiny_fit(runs, "--trainer.max_epochs", "1", "--test", "false")])
    run = seqrec.load_run(next(runs.glob("*/version_0")), checkpoint="last", threads=1)
    capsys.readouterr()
    assert run.model is run.net and run.model is run.task.net
    assert notes(capsys) == ["note: TrainedRun.model is now TrainedRun.net"]


def test_no_shipped_config_uses_the_old_key():
    for path in Path(resolve_config("sasrec_ml1m")).parent.rglob("*.yaml"):
        document = yaml.safe_load(path.read_text())
        assert rename_config(document) is None, path
        assert "init_args.model" not in path.read_text() and "model.model" not in path.read_text(), path
