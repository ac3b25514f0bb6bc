"""The one builder: shipped configs validate, names resolve, composition stacks parts, resolved configs are stable."""

import json
import re
from pathlib import Path

import pytest

from seqrec.build import parse
from seqrec.callbacks.signals import Interrupted
from seqrec.child_process import Stopped
from seqrec.config_files import CONFIG_DIR, expand_config, expand_config_args, resolve_config, shipped_configs
from seqrec.errors import run_command
from tests.fixtures.resolved_configs import resolved

FIXTURES = Path(__file__).parent / "fixtures"
SHIPPED = shipped_configs()


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_validates(name):
    config = parse(["--config", name])
    assert config.model.class_path and config.data.class_path


def test_config_names_resolve_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config("sasrec_ml100k.yaml") == str(CONFIG_DIR / "sasrec_ml100k.yaml")
    assert resolve_config("configs/sasrec_ml100k.yaml") == str(CONFIG_DIR / "sasrec_ml100k.yaml")
    assert resolve_config("sasrec_ml100k") == str(CONFIG_DIR / "sasrec_ml100k.yaml")
    files, name = expand_config_args(["--config=sasrec_ml100k.yaml", "--trainer.max_epochs", "1"])
    assert name == "sasrec_ml100k" and files[-2:] == ["--trainer.max_epochs", "1"]
    assert files[-4:-2] == ["--config", str(CONFIG_DIR / "sasrec_ml100k.yaml")]
    with pytest.raises(FileNotFoundError, match="shipped experiments: .*sasrec_ml100k"):
        resolve_config("nope.yaml")


def test_compose_stacks_parts_before_the_file_and_later_files_win(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "base.yaml").write_text("trainer:\n  max_epochs: 7\n  gradient_clip_val: 1.0\n")
    (tmp_path / "parts" / "more.yaml").write_text("compose: [base.yaml]\ntrainer:\n  max_epochs: 9\n")
    experiment = tmp_path / "exp.yaml"
    experiment.write_text("compose: [sasrec_ml100k, parts/more.yaml]\ntrainer:\n  gradient_clip_val: 2.0\n")
    files = expand_config(str(experiment))
    assert [Path(f).name for f in files] == [
        "default.yaml", "ml100k_full_ranking.yaml", "sasrec.yaml", "sasrec_ml100k.yaml", "base.yaml", "more.yaml", "exp.yaml"]
    config = parse(["--config", str(experiment)])
    assert config.trainer.max_epochs == 9 and config.trainer.gradient_clip_val == 2.0
    assert config.trainer.logger.init_args.name == "exp"  # the run is named after the experiment, not a part
    assert parse(["--config", str(experiment), "--trainer.max_epochs", "3"]).trainer.max_epochs == 3


def test_compose_cycles_and_bad_yaml_are_one_line_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("compose: [b.yaml]\n")
    (tmp_path / "b.yaml").write_text("compose: [a.yaml]\n")
    with pytest.raises(ValueError, match="composes itself"):
        expand_config(str(tmp_path / "a.yaml"))
    (tmp_path / "bad.yaml").write_text("trainer:\n  max_epochs: [1\n")
    with pytest.raises(ValueError, match=r"bad.yaml line \d+: not valid YAML"):
        expand_config(str(tmp_path / "bad.yaml"))


def _flat(value, prefix=""):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(_flat(v, f"{prefix}{i}."))
        return out or {prefix.rstrip("."): []}
    return {prefix.rstrip("."): value}


@pytest.mark.parametrize("name", SHIPPED)
def test_resolved_config_equals_the_golden_file(name):
    """Key by key, every shipped experiment resolves as ``tests/fixtures/resolved_configs.json`` records it.

    A deliberate change regenerates the file (``make golden``) and shows in its diff.
    """
    golden = json.loads((FIXTURES / "resolved_configs.json").read_text())
    assert name in golden, f"{name} is not in the golden file: run make golden and review the diff"
    old, new = _flat(golden[name]), _flat(resolved(name))
    differ = {k: (old.get(k, "<absent>"), new.get(k, "<absent>"))
              for k in sorted(set(old) | set(new)) if old.get(k, "<absent>") != new.get(k, "<absent>")}
    assert not differ, differ


def test_the_golden_file_holds_exactly_the_shipped_experiments():
    assert sorted(json.loads((FIXTURES / "resolved_configs.json").read_text())) == SHIPPED


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--data.max_len", "0"], "--data.max_len 0: must be a positive integer"),
        (["--data.batch_size", "-1"], "--data.batch_size -1: must be a positive integer"),
        (["--model.init_args.lr", "-1"], "--model.lr -1.0: must be a positive number"),
        (["--model.net.dropout", "1.5"], "--model.net.dropout 1.5: must be a fraction in [0, 1)"),
        (["--data.eval_negatives", "100", "--model.init_args.metrics", "[hr@10, ndcg@10, hr@500]"],
         "--model.metrics ['hr@500']: k larger than the 101 candidates of sampled evaluation"),
        (["--model.init_args.metrics", "[hr@10]"],
         "ModelCheckpoint (trainer.callbacks[0]) monitors 'val/ndcg@10', which --model.metrics ['hr@10'] does not log"),
    ],
)
def test_values_no_run_could_use_fail_when_the_config_is_parsed(flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse(["--config", "sasrec_ml100k", *flags])


def test_run_command_reports_one_line_with_the_exit_status(capsys, monkeypatch):
    def bad_input(argv):
        raise ValueError("no such thing\n  (details on a second line)")

    def crash(argv):
        raise RuntimeError("it broke")

    def stopped(argv):
        raise Interrupted(15, Path("runs/x/version_0/checkpoints/last.ckpt"), 3, 57)

    def child_stopped(argv):  # a grid's or repro's fit, stopped by a forwarded SIGINT
        raise Stopped("fit_a stopped by SIGINT at a resume point: run the same command again to continue", 130)

    monkeypatch.delenv("SEQREC_DEBUG", raising=False)
    for command, code, text in ((bad_input, 2, "error: no such thing (details on a second line)\n"),
                                (crash, 1, "error: RuntimeError: it broke (--debug shows the traceback)\n"),
                                (stopped, 143, "stopped by SIGTERM at epoch 3, step 57: checkpoint runs/x/version_0/checkpoints/last.ckpt\n"),
                                (child_stopped, 130, "fit_a stopped by SIGINT at a resume point: run the same command again to continue\n")):
        with pytest.raises(SystemExit) as exit_info:
            run_command(command, ["--config", "x"])
        assert exit_info.value.code == code and capsys.readouterr().err == text
    with pytest.raises(SystemExit):  # --debug (or SEQREC_DEBUG=1): the traceback too
        run_command(crash, ["--debug"])
    assert "Traceback (most recent call last)" in capsys.readouterr().err
    monkeypatch.setenv("SEQREC_DEBUG", "1")
    with pytest.raises(SystemExit):
        run_command(crash, [])
    assert "Traceback (most recent call last)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "sasrec_ml100kk"], "error: config 'sasrec_ml100kk' is neither a file nor a shipped config"),
        (["--config", "sasrec_ml100k", "--config", "BAD"], "BAD line 3: not valid YAML"),
    ],
)
def test_fit_reports_bad_configs_in_one_line_before_anything_is_built(args, message, tmp_path, capsys, monkeypatch):
    from seqrec.fit import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("trainer:\n  max_epochs: [1\n")
    args = [str(tmp_path / "bad.yaml") if a == "BAD" else a for a in args]
    message = message.replace("BAD", str(tmp_path / "bad.yaml"))
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert exit_info.value.code == 2 and len(err) == 1 and message in err[0]
    assert not (tmp_path / "runs").exists()


def test_k_above_the_catalogue_in_full_ranking_fails_before_a_run_directory_exists(ml100k_root, tmp_path, capsys):
    """The probe: ``hr@5000`` on a 1,349-item catalogue was accepted in full ranking and reported 1.0."""
    from seqrec.__main__ import main
    from tests.test_fit import tiny

    metrics = ["--model.init_args.metrics", "[hr@10, ndcg@10, hr@5000]"]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *tiny(ml100k_root, tmp_path / "runs"), *metrics])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert exit_info.value.code == 2 and len(err) == 1, err
    assert re.fullmatch(r"error: --model\.metrics \['hr@5000'\]: k larger than the catalogue of \d+ items \(full "
                        r"ranking\) makes every query a hit; use k <= \d+", err[0]), err[0]
    assert not (tmp_path / "runs").exists()


def test_the_data_window_reaches_a_network_that_takes_one_when_the_config_is_parsed():
    config = parse(["--config", "sasrec_ml100k", "--data.init_args.max_len", "30"])
    assert config.data.init_args.max_len == config.model.init_args.net.init_args.max_len == 30
    assert "max_len" not in parse(["--config", "lru_ml1m"]).model.init_args.net.init_args  # LRURec has no window
    wrapped = parse(["--config", "ctr_transformer_snapkv_ml1m", "--data.init_args.max_len", "40"])
    assert wrapped.model.init_args.net.init_args.max_len == 40  # a compression wrapper passes it to its backbone


def _callbacks(config):
    return [cb.class_path.rsplit(".", 1)[-1] for cb in config.trainer.callbacks or []]


@pytest.mark.parametrize("protocol", sorted(p.name for p in (CONFIG_DIR / "protocol").glob("*.yaml")))
def test_every_protocol_composes_the_one_trainer_part(protocol):
    files = expand_config(str(CONFIG_DIR / "protocol" / protocol))
    assert files[0] == str(CONFIG_DIR / "protocol" / ".." / "trainer" / "default.yaml")
    text = (CONFIG_DIR / "protocol" / protocol).read_text()
    assert "save_last" not in text and "class_path: seqrec.loggers.run_logger.RunLogger" not in text


def test_early_stopping_and_checkpointing_switch_off_with_one_flag_each():
    assert _callbacks(parse(["--config", "sasrec_ml100k"])) == ["ModelCheckpoint", "EarlyStopping"]
    config = parse(["--config", "sasrec_ml100k", "--early_stopping", "false"])
    assert _callbacks(config) == ["ModelCheckpoint"] and "early_stopping" not in config  # the list records it
    config = parse(["--config", "sasrec_ml100k", "--early_stopping", "false", "--trainer.enable_checkpointing", "false"])
    assert _callbacks(config) == []
    config = parse(["--config", "sasrec_ml100k", "--trainer.enable_checkpointing", "false", "--test", "false"])
    assert _callbacks(config) == ["EarlyStopping"]
    assert _callbacks(parse(["--config", "evornn_lm1b"])) == ["ModelCheckpoint"]  # the LM protocol: no early stopping
    config = parse(["--config", "evornn_lm1b", "--early_stopping", "true"])  # unless asked for: on its monitor
    assert _callbacks(config) == ["ModelCheckpoint", "EarlyStopping"]
    assert config.trainer.callbacks[1].init_args.monitor == "val/perplexity"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--config", "sasrec_ml100k", "--trainer.enable_checkpointing", "false"],
         "--trainer.enable_checkpointing false with early stopping on: the test after fitting would score the "
         "weights of the last validation, not the best; add --early_stopping false or --test false"),
        (["--config", "sasrec_ml100k", "--trainer.callbacks", "[]", "--early_stopping", "true"],
         "--early_stopping true: the config declares no EarlyStopping in trainer.callbacks"),
    ],
)
def test_an_ambiguous_callback_switch_is_a_one_line_error(flags, message):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        parse(flags)
    assert "\n" not in str(error.value)
