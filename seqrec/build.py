"""The one builder: config files and dotted overrides -> a validated config -> datamodule, task and trainer.

Every command builds its run here (``seqrec fit``, ``test``, ``predict``, the benchmarks and the tools), so
a change to how a run is assembled is made once. Configs are LightningCLI YAML validated by jsonargparse:

- several ``--config`` files stack (later ones override) and any key can be overridden with a dotted flag
  (``--trainer.max_epochs 3``, ``--data.max_len 100``);
- a bare name (``lru_ml1m``, ``lru_ml1m.yaml``, ``configs/lru_ml1m.yaml``) that is not a file in the current
  directory is looked up among the configs shipped with the package;
- a config may start with ``compose: [protocol/lrurec_ml1m.yaml, model/lru.yaml]``: those parts (paths
  relative to the file, or shipped names) are stacked before it, recursively, so an experiment file names its
  parts and only what differs (``configs/README.md``).

Links the data into the model once, for every command: ``data.num_items`` -> the model's ``num_items``,
``data.item_feature_spec`` -> a feature model's ``feature_spec``, ``data.max_len`` -> a model whose
constructor takes ``max_len``.

Values are checked when the config is parsed, before any data is loaded or any run directory exists
(``check_values``: sizes, learning rates, ``@k`` against the candidate set, the monitored metric among the
logged ones). Every run writes its checkpoints atomically (``AtomicCheckpointIO``) and its config.yaml
atomically. ``run_command`` is how a command reports a failure: one line ``error: ...`` with the fix (exit
status 2 for bad input, 1 otherwise, 128 + signal when stopped by one); ``--debug`` or ``SEQREC_DEBUG=1``
shows the traceback instead.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import lightning as L
import torch
import yaml
from jsonargparse import ArgumentError, Namespace
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.trainer.states import TrainerFn

from seqrec.atomic import write_text
from seqrec.callbacks.checkpoint_io import AtomicCheckpointIO, CheckpointWriteError
from seqrec.callbacks.macs import MACsCallback
from seqrec.callbacks.memory import MemoryCallback
from seqrec.callbacks.signals import Interrupted
from seqrec.callbacks.throughput import ThroughputCallback
from seqrec.loggers.run_logger import RunLogger, check_logger_names

CONFIG_DIR = Path(__file__).parent / "configs"
COMPOSE_KEY = "compose"


# --- config files ---------------------------------------------------------------------------------------
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


# --- checks and settings applied before anything is built ------------------------------------------------
def default_threads() -> int:
    """Cores this process may run on (affinity-aware); torch's intra-op pool should not exceed them."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_strategy(trainer_cfg: Namespace) -> None:
    """Fail at start, with what to use instead, when the strategy cannot run on this machine."""
    strategy = trainer_cfg.get("strategy")
    text = str(strategy.get("class_path", "") if isinstance(strategy, Namespace) else strategy or "")
    if "deepspeed" not in text.lower():
        return
    if not torch.cuda.is_available() or str(trainer_cfg.get("accelerator", "auto")).lower() == "cpu":
        raise ValueError(
            f"DeepSpeed (trainer.strategy={text!r}) needs CUDA GPUs, and this run has none: on CPU use several "
            "processes with --config configs/trainer/ddp.yaml --trainer.accelerator cpu --trainer.devices N"
        )
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        raise ValueError(f"trainer.strategy={text!r} needs the deepspeed package: pip install 'seqrec[deepspeed]'") from None


# value rules by key name, wherever the key sits (data.init_args.batch_size, model.init_args.model.init_args.d_model)
POSITIVE_INTS = ("max_len", "batch_size", "eval_batch_size", "d_model", "num_blocks", "num_heads", "num_layers",
                 "eval_negatives", "train_negatives", "accumulate_grad_batches")
POSITIVE = ("lr",)
NON_NEGATIVE = ("weight_decay", "num_workers", "gradient_clip_val", "patience")
FRACTIONS = ("dropout",)  # in [0, 1)
_RANKING = re.compile(r"^(?P<kind>[a-z]+)@(?P<k>\d+)$")


def _leaves(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of every leaf of a config (Namespace, dict, list)."""
    if isinstance(value, Namespace):
        value = value.as_dict()
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            out += _leaves(item, f"{prefix}{key}.")
        return out
    if isinstance(value, list):
        out = []
        for i, item in enumerate(value):
            out += _leaves(item, f"{prefix}{i}.")
        return out
    return [(prefix.rstrip("."), value)]


def flag_name(key: str) -> str:
    """The short dotted flag of a config key (``data.init_args.batch_size`` -> ``data.batch_size``)."""
    return key.replace(".init_args.", ".")


def check_values(config: Namespace) -> None:
    """ValueError naming the flag, the value and what is accepted, for values no run could use.

    Checked by key name anywhere in the config: ``POSITIVE_INTS`` >= 1, ``POSITIVE`` > 0, ``NON_NEGATIVE``
    >= 0, ``FRACTIONS`` in [0, 1); plus the metrics (``check_metrics``).
    """
    for key, value in _leaves(config):
        name = key.rsplit(".", 1)[-1]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if name in POSITIVE_INTS and (value < 1 or value != int(value)):
            problem = "a positive integer"
        elif name in POSITIVE and not value > 0:
            problem = "a positive number"
        elif name in NON_NEGATIVE and value < 0:
            problem = "a number >= 0"
        elif name in FRACTIONS and not 0 <= value < 1:
            problem = "a fraction in [0, 1)"
        else:
            continue
        raise ValueError(f"--{flag_name(key)} {value}: must be {problem}")
    check_metrics(config)


def check_metrics(config: Namespace) -> None:
    """Ranking metrics: ``@k`` at most the candidates of sampled evaluation; monitored metrics among those logged."""
    model = config.get("model")
    metrics = model.init_args.get("metrics") if isinstance(model, Namespace) and "init_args" in model else None
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        return
    data = config.get("data")
    negatives = data.init_args.get("eval_negatives") if isinstance(data, Namespace) and "init_args" in data else None
    if isinstance(negatives, int) and not isinstance(negatives, bool):
        candidates = negatives + 1
        too_big = [m for m in metrics if (match := _RANKING.match(m)) and int(match["k"]) > candidates]
        if too_big:
            raise ValueError(
                f"--model.metrics {too_big}: k larger than the {candidates} candidates of sampled evaluation "
                f"(the target + data.eval_negatives {negatives}) makes every query a hit; use k <= {candidates}"
            )
    logged = {f"{split}/{m}" for m in metrics for split in ("val", "test")}
    for i, callback in enumerate(config.trainer.get("callbacks") or []):
        if not isinstance(callback, Namespace) or "init_args" not in callback:
            continue
        monitor = callback.init_args.get("monitor")
        if isinstance(monitor, str) and _RANKING.match(monitor.partition("/")[2]) and monitor not in logged:
            kind = str(callback.get("class_path", "")).rsplit(".", 1)[-1]
            raise ValueError(
                f"{kind} (trainer.callbacks[{i}]) monitors {monitor!r}, which --model.metrics {metrics} does not "
                f"log: add {monitor.partition('/')[2]!r} to the metrics or set its monitor to one of "
                f"{sorted(m for m in logged if m.startswith('val/'))}"
            )


def name_run_logger(config: Namespace, experiment: str | None) -> None:
    """Check a RunLogger's backend names; name it after the experiment (``lru_ml1m``) unless a name is set."""
    logger = config.trainer.get("logger")
    if not isinstance(logger, Namespace) or not str(logger.get("class_path", "")).endswith(".RunLogger"):
        return
    check_logger_names(logger.init_args.get("loggers"))
    if logger.init_args.get("name") is None:
        logger.init_args.name = experiment or "run"


def import_class(class_path: str) -> type:
    """The class named by a dotted ``class_path``."""
    module_name, _, cls_name = class_path.rpartition(".")
    return getattr(__import__(module_name, fromlist=[cls_name]), cls_name)


def copy_max_len(config: Namespace) -> None:
    """Give ``data.max_len`` to a model whose constructor takes ``max_len`` (positions, windows)."""
    model_cfg = config.model.init_args.get("model")
    if isinstance(model_cfg, Namespace) and model_cfg.get("class_path"):
        if "max_len" in inspect.signature(import_class(model_cfg.class_path).__init__).parameters:
            model_cfg.init_args.max_len = config.data.init_args.max_len


def explain_parse_error(message: str) -> str:
    """Add the accepted argument names of the class named in a jsonargparse error about an unknown key."""
    unknown = re.findall(r"(?:Option|Key) '([^']+)' is not (?:accepted|expected)", message)
    classes = re.findall(r"given class_path '([^']+)'", message)
    if not unknown or not classes:
        return message
    try:
        cls = import_class(classes[-1])
        valid = [n for n in inspect.signature(cls.__init__).parameters if n not in ("self", "args", "kwargs")]
    except (ImportError, AttributeError, ValueError):
        return message
    return f"unknown key {unknown[-1]!r} for {classes[-1]}; valid keys: {', '.join(valid)}"


# --- the CLI parser --------------------------------------------------------------------------------------
class SeqRecCLI(LightningCLI):
    """LightningCLI (subclass mode: any task, any datamodule) with seqrec's arguments, links and checks."""

    experiment: str | None = None  # set by build() from the first --config the user gave
    adjust: Callable[[Namespace], None] | None = None  # a command's own step between parsing and building

    def add_arguments_to_parser(self, parser) -> None:  # noqa: ANN001 (jsonargparse parser)
        """Run-level flags, the data -> model links, the cost callbacks and the default run logger."""
        parser.add_argument(f"--{COMPOSE_KEY}", type=list[str] | None, default=None,
                            help="config parts a config file stacks on (expanded before parsing)")
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="resume fit from this checkpoint ('last' for the run's last one)")
        parser.add_argument("--threads", type=int | None, default=None, help="torch intra-op threads (default: the cores available)")
        parser.add_argument("--test", type=bool, default=True, help="test the best checkpoint after fitting")
        parser.add_argument("--validate_first", type=bool, default=False, help="validate once before training (LRURec's step-0 validation)")
        parser.link_arguments("data.num_items", "model.init_args.model.init_args.num_items", apply_on="instantiate")
        # item-feature models (MLP4Rec): names, kinds and vocabulary sizes from the data; skipped by jsonargparse
        # when the model has no feature_spec or the datamodule no item_feature_spec
        parser.link_arguments(
            "data.item_feature_spec", "model.init_args.model.init_args.feature_spec", apply_on="instantiate"
        )
        # every run reports what it cost (--macs.*, --memory.*, --throughput.*) and logs to its run directory
        parser.add_lightning_class_args(MACsCallback, "macs")
        parser.add_lightning_class_args(MemoryCallback, "memory")
        parser.add_lightning_class_args(ThroughputCallback, "throughput")
        parser.set_defaults({"trainer.logger": {"class_path": f"{RunLogger.__module__}.RunLogger", "init_args": {"save_dir": "runs"}}})

    def parse_arguments(self, parser, args) -> None:  # noqa: ANN001 (jsonargparse parser)
        """Parse; on an unknown key, name it and list the keys the class at that place accepts."""
        parser.exit_on_error = False
        try:
            self.config = parser.parse_args(args)
        except ArgumentError as error:
            message = " ".join(explain_parse_error(str(error)).split())
            print(f"error: {message} (python -m seqrec fit --help lists every key)", file=sys.stderr)
            raise SystemExit(2) from None

    def before_instantiate_classes(self) -> None:
        """Threads, the strategy check, the run's name and ``max_len`` into the model."""
        config = self.config
        config[COMPOSE_KEY] = None  # already expanded; a saved config.yaml must not compose again
        check_values(config)
        check_strategy(config.trainer)
        if config.threads is not None and config.threads < 1:
            raise ValueError(f"--threads {config.threads}: must be a positive integer (or leave it out: the cores available)")
        torch.set_num_threads(config.threads or default_threads())
        name_run_logger(config, self.experiment)
        copy_max_len(config)
        if self.adjust is not None:
            self.adjust(config)


class ParseOnly(SeqRecCLI):
    """Parses and validates a config (class paths, argument names and types) without building anything."""

    def before_instantiate_classes(self) -> None:
        """Check values and name the run as a real build would, but set nothing process-wide."""
        self.config[COMPOSE_KEY] = None
        check_values(self.config)
        name_run_logger(self.config, self.experiment)

    def instantiate_classes(self) -> None:
        """Build nothing."""


class SaveRunConfig(SaveConfigCallback):
    """config.yaml in the run directory, written atomically on rank 0.

    A fit records the config that runs (``ckpt_path`` left out: how a sitting started is not part of the
    run); resuming checks first that it equals the saved one (``seqrec.fit.resolve_resume``).
    """

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Write config.yaml once per process."""
        if self.already_saved:
            return
        log_dir = trainer.log_dir  # broadcast from rank 0
        if trainer.is_global_zero and log_dir is not None:
            path = Path(log_dir) / self.config_filename
            config = self.config.clone()
            if trainer.state.fn == TrainerFn.FITTING and "ckpt_path" in config:
                config.ckpt_path = None
                _keep_saved_version(config, path)
            write_text(path, self.parser.dump(config, skip_none=False))
        self.already_saved = True


def _keep_saved_version(config: Namespace, path: Path) -> None:
    """A resumed run's config.yaml keeps the logger version its first sitting recorded (``null``: the next free)."""
    logger = config.trainer.get("logger")
    if not path.is_file() or not isinstance(logger, Namespace) or "init_args" not in logger:
        return
    try:
        saved = yaml.safe_load(path.read_text())
        logger.init_args.version = saved["trainer"]["logger"]["init_args"].get("version")
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return


def _cli(cls: type[SeqRecCLI], args: list[str], adjust: Callable[[Namespace], None] | None = None,
         save_config: bool = True) -> SeqRecCLI:
    """Expand the configs in ``args`` and run the CLI class over them (``run=False``: nothing is fitted)."""
    expanded, experiment = expand_config_args(list(args))
    cls = type(cls.__name__, (cls,), {"experiment": experiment, "adjust": staticmethod(adjust) if adjust else None})
    return cls(
        L.LightningModule,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        run=False,
        args=expanded,
        seed_everything_default=42,
        save_config_kwargs={"overwrite": True},
        save_config_callback=SaveRunConfig if save_config else None,
        parser_kwargs={"allow_abbrev": False},  # a typo such as --trainer.max_epoch must fail, not match a prefix
    )


def parse(args: list[str]) -> Namespace:
    """The validated, resolved config of ``args`` (``--config`` files and dotted overrides); nothing is built."""
    return _cli(ParseOnly, args).config


def resolved_dict(args: list[str]) -> dict[str, Any]:
    """``parse(args)`` as a plain dict without the bookkeeping keys (``config``, ``compose``)."""
    config = parse(args).clone().as_dict()
    for key in ("config", COMPOSE_KEY):
        config.pop(key, None)
    return config


@dataclass
class Run:
    """A built run: the resolved config and the objects it names, linked."""

    config: Namespace
    datamodule: L.LightningDataModule
    task: L.LightningModule
    trainer: L.Trainer
    cli: SeqRecCLI


def build(args: list[str], adjust: Callable[[Namespace], None] | None = None, save_config: bool = True) -> Run:
    """Parse ``args`` and build the datamodule, the task (its model linked to the data) and the trainer.

    ``adjust(config)`` runs on the parsed config before anything is built (e.g. resume picks the run directory).
    ``save_config=False`` (benchmarks, tools) keeps the trainer from writing ``config.yaml`` into its log
    directory, which is the working directory when the run has no logger.
    """
    cli = _cli(SeqRecCLI, args, adjust, save_config)
    install_checkpoint_io(cli.trainer)
    return Run(cli.config, cli.datamodule, cli.model, cli.trainer, cli)


def install_checkpoint_io(trainer: L.Trainer) -> None:
    """Write the trainer's checkpoints atomically (``AtomicCheckpointIO``) where it uses torch's writer."""
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


def build_datamodule(args: list[str]) -> L.LightningDataModule:
    """Only the datamodule of ``args`` (for tools that read data without a model or a trainer)."""
    from jsonargparse import ArgumentParser

    data = parse(args).data
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(L.LightningDataModule, "data")
    return parser.instantiate(parser.parse_object({"data": data.as_dict()})).data


def bind(task: L.LightningModule, datamodule: L.LightningDataModule) -> L.LightningModule:
    """Give ``task`` what it takes from the data outside a Trainer (item-feature tables); return it."""
    bind_data = getattr(task, "bind_data", None)
    if callable(bind_data):
        bind_data(datamodule)
    return task


# --- how a command fails ---------------------------------------------------------------------------------
T = TypeVar("T")
DEBUG_FLAG = "--debug"
BAD_INPUT = (ValueError, FileNotFoundError, NotADirectoryError, PermissionError, ArgumentError)


def debugging(argv: list[str]) -> bool:
    """True with ``--debug`` among the arguments or ``SEQREC_DEBUG`` set (to anything but 0/false)."""
    env = os.environ.get("SEQREC_DEBUG", "").strip().lower()
    return DEBUG_FLAG in argv or env not in ("", "0", "false", "no")


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line; for jsonargparse's wrapped instantiation errors, the cause's."""
    root = error
    wrapped = type(error).__module__.startswith("jsonargparse") or "Given value:" in str(error)
    while wrapped and (root.__cause__ or root.__context__) is not None:
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    if isinstance(root, OSError) and root.strerror and root.filename:
        text = f"{root.strerror}: {root.filename}"
    else:
        text = str(root) or type(root).__name__
    if isinstance(root, KeyError) and len(root.args) == 1:
        text = f"missing key {root.args[0]!r}"
    text = " ".join(text.split())
    return text if len(text) <= 2000 else text[:2000] + " ..."


def run_command(command: Callable[[list[str]], T], argv: list[str] | None = None) -> T:
    """Run ``command(argv)``; report a failure as one line on stderr and exit (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debugging(argv)
    argv = [a for a in argv if a != DEBUG_FLAG]
    try:
        return command(argv)
    except SystemExit:
        raise
    except Interrupted as stop:
        if debug:
            traceback.print_exc()
        print(f"{stop}", file=sys.stderr, flush=True)
        raise SystemExit(stop.exit_code) from None
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("error: interrupted (SIGINT)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except Exception as error:  # noqa: BLE001 (every failure a user sees is one line)
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (--debug shows the traceback)"
        code = 2 if isinstance(error, BAD_INPUT) and not isinstance(error, CheckpointWriteError) else 1
        kind = "" if isinstance(error, BAD_INPUT + (CheckpointWriteError, OSError)) else f"{type(error).__name__}: "
        print(f"error: {kind}{one_line(error)}{hint if code == 1 and kind else ''}", file=sys.stderr, flush=True)
        raise SystemExit(code) from None
