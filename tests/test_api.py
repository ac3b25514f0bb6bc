"""``seqrec.load_run``: the README's "Use your own data" section runs as written (CSV -> config -> fit -> predict, a
Hugging Face folder the same way, the Python snippet); recommend equals predict; LRURec's O(1) path equals recommend."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch

import seqrec
from seqrec.__main__ import main
from tests.data.sources.test_interactions_file import write_events

pq = pytest.importorskip("pyarrow.parquet")
pa_csv = pytest.importorskip("pyarrow.csv")
datasets = pytest.importorskip("datasets")

README = Path(__file__).resolve().parent.parent / "README.md"
# appended to every `fit` line of the README so the runs take seconds (the commands are otherwise as written)
SHRINK = ["--trainer.max_epochs", "2", "--model.net.d_model", "16", "--threads", "1",
          "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.loggers", "[csv]"]


def readme_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block of the README's "Use your own data" section."""
    text = README.read_text()
    section = text[text.index("## Use your own data"):]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```(bash|python)\n(.*?)```", section, re.S)


def run_bash(code: str, extra_fit: list[str] = ()) -> list[object]:
    """Run each ``.venv/bin/seqrec ...`` line of a README block through the CLI's ``main``."""
    results = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line)
        if not words or words[0] != ".venv/bin/seqrec":
            assert not words or not words[0].startswith(".venv/bin/"), line  # every command through the script
            continue
        argv = words[1:]
        results.append(main(argv + (SHRINK + list(extra_fit) if argv[0] == "fit" else [])))
    return results


@pytest.fixture(scope="module")
def readme_dir(tmp_path_factory) -> Path:
    """A folder where the README's commands ran: events.csv, my_dataset/ (written with datasets), the runs."""
    root = tmp_path_factory.mktemp("readme")
    write_events(root / "events.csv")
    blocks = readme_blocks()
    bash = [code for lang, code in blocks if lang == "bash"]
    assert len(bash) == 2 and [lang for lang, _ in blocks].count("python") == 1
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setenv("SEQREC_CACHE", str(tmp_path_factory.mktemp("cache")))
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf")))
        fit, predicted = run_bash(bash[0])  # CSV -> config -> fit -> predict
        assert "test/hr@10" in fit and predicted["users"] == 60
        # LRURec for the Python snippet: the README's fit line with the other shipped config
        run_bash(bash[0].splitlines()[0].replace("sasrec_interactions.yaml", "lru_interactions.yaml"))
        # a Hugging Face dataset folder, written with datasets itself, the same way
        datasets.load_dataset("csv", data_files="events.csv", split="train").save_to_disk("my_dataset")
        hf_fit, hf_predicted = run_bash(bash[1])
        assert hf_fit == pytest.approx(fit, abs=1e-6)  # the same data, ids and protocol: the same run
    return root


def test_the_readme_commands_write_top10_in_the_users_own_ids(readme_dir):
    table = pa_csv.read_csv(readme_dir / "top10.csv").to_pydict()
    assert list(table) == ["user", "rank", "item", "score"]
    users = np.array(table["user"])
    assert set(users) >= {"alice", "bob"} and np.all(np.bincount(np.unique(users, return_inverse=True)[1]) == 10)
    assert all(re.fullmatch(r"m\d+", item) for item in table["item"]) and table["rank"][:10] == list(range(1, 11))
    hf = pq.read_table(readme_dir / "top10_hf.parquet").to_pydict()
    assert hf["user"] == table["user"] and hf["item"] == table["item"]


def test_the_readme_python_snippet_runs(readme_dir, monkeypatch):
    monkeypatch.chdir(readme_dir)
    [code] = [code for lang, code in readme_blocks() if lang == "python"]
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 (the README's own example)
    recs, known, top = namespace["recs"], namespace["known"], namespace["top"]
    assert len(recs["alice"]) == 10 and not {"m35", "m36", "m37"} & {item for item, _ in recs["alice"]}
    assert set(known) == {"alice", "bob"} and all(len(v) == 10 for v in known.values())
    # the O(1) recurrent path gives the same list as ranking the same history at once
    lru = namespace["lru"]
    at_once = lru.recommend([["m35", "m36", "m37"]], k=10)[0]
    assert [item for item, _ in top[0]] == [item for item, _ in at_once]
    assert np.allclose([s for _, s in top[0]], [s for _, s in at_once], atol=1e-4)


def test_recommend_users_equals_predict_and_unknown_items_are_skipped(readme_dir, monkeypatch, caplog):
    monkeypatch.chdir(readme_dir)
    run = seqrec.load_run("runs/sasrec_interactions/version_0", threads=1)
    (readme_dir / "two.txt").write_text("bob\nalice\n")
    out = main(["predict", "runs/sasrec_interactions/version_0", "--users", "two.txt", "--k", "5",
                "--out", "two.parquet", "--threads", "1"])
    assert out["rows"] == 10
    table = pq.read_table(readme_dir / "two.parquet").to_pydict()
    known = run.recommend_users(["bob", "alice"], k=5)
    assert [(u, i) for u in known for i, _ in known[u]] == list(zip(table["user"], table["item"]))
    history = list(run.sequences.raw_item_ids(run.sequences.sequence(int(run.user_rows(["bob"])[0]))))
    alone = run.recommend({"bob": history}, k=5)["bob"]  # a batch of one: the same list, scores to float precision
    assert [i for i, _ in alone] == [i for i, _ in known["bob"]]
    assert np.allclose([s for _, s in alone], [s for _, s in known["bob"]], atol=1e-5)
    with_unknown = run.recommend([["m35", "not-an-item", "m36"]], k=3)
    assert with_unknown == run.recommend([["m35", "m36"]], k=3) and "not in the catalogue" in caplog.text
    with pytest.raises(ValueError, match="no item the catalogue knows"):
        run.recommend({"carol": ["nope"]}, k=3)
    with pytest.raises(TypeError, match="not a recurrent model"):
        run.init_state()
    candidates = run.recommend([["m35"]], k=3, candidates=["m1", "m2", "m3", "m35"])[0]
    assert {item for item, _ in candidates} == {"m1", "m2", "m3"}  # m35 is seen: excluded


def test_load_run_builds_the_task_and_data_without_a_trainer(readme_dir, monkeypatch):
    import functools

    import lightning

    @functools.wraps(lightning.pytorch.Trainer.__init__)  # the signature stays (the parser reads the trainer's flags)
    def no_trainer(*args, **kwargs) -> None:
        raise AssertionError("load_run built a Trainer")

    monkeypatch.chdir(readme_dir)
    monkeypatch.setattr(lightning.pytorch.Trainer, "__init__", no_trainer)
    run = seqrec.load_run("runs/lru_interactions/version_0", threads=1)
    assert type(run.net).__name__ == "LRURec"
    saved = torch.load(run.checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    assert saved.keys() == run.task.state_dict().keys()
    assert all(torch.equal(saved[key], value) for key, value in run.task.state_dict().items())
    assert run.item_rows(["m35", "nope", "m36"]).tolist() == run.items.rows(["m35", "nope", "m36"]).tolist()
    assert run.item_rows(["m35"])[0] > 0 and run.item_rows(["nope"])[0] == 0
    state = run.update(run.init_state(), "m35")
    assert run.session is run.session and len(run.topk(state, k=3)[0]) >= 3
