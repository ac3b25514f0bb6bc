"""The one builder: config files and dotted overrides -> a validated config -> datamodule, task and trainer.

Every command builds its run here (``seqrec fit``, ``test``, ``predict``, the benchmarks and the tools), so
a change to how a run is assembled is made once. Configs are LightningCLI YAML validated by jsonargparse:

- several ``--config`` files stack (later ones override) and any key can be overridden with a dotted flag
  (``--trainer.max_epochs 3``, ``--data.max_len 100``);
- config names and ``compose:`` parts are resolved by ``seqrec.config_files``.

Links the data into the model once, for every command: ``data.num_items`` -> the model's ``num_items``,
``data.item_feature_spec`` -> a feature model's ``feature_spec`` (both when built), ``data.max_len`` -> a model whose
constructor takes ``max_len`` (when parsed). The data is a ``seqrec.datamodules.base.RecommendationData``.

Values are checked when the config is parsed, before any data is loaded or any run directory exists
(``seqrec.checks``). Every run writes its checkpoints atomically (``AtomicCheckpointIO``) and its config.yaml
atomically. A command reports a failure as one line (``seqrec.errors.run_command``).
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from jsonargparse import ArgumentError, Namespace
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.trainer.states import TrainerFn

from seqrec.allocator import keep_freed_memory
from seqrec.atomic import write_text
from seqrec.callbacks.checkpoint_io import AtomicCheckpointIO
from seqrec.callbacks.macs import MACsCallback
from seqrec.callbacks.memory import MemoryCallback
from seqrec.callbacks.rng import RNGStateCheckpoint
from seqrec.callbacks.signals import SignalCheckpoint, sitting_seconds
from seqrec.callbacks.throughput import ThroughputCallback
from seqrec.checks import check_strategy, check_values
from seqrec.config_files import COMPOSE_KEY, CONFIG_DIR, expand_config_args
from seqrec.datamodules.base import RecommendationData
from seqrec.loggers.run_logger import SittingMarker, check_logger_names
from seqrec.renamed_keys import rename_args
from seqrec.runs import write_origin
from seqrec.tasks.base import RecommendationTask

TRAINER_PART = CONFIG_DIR / "trainer" / "default.yaml"
EARLY_STOPPING_KEY = "early_stopping"  # a switch, consumed before building: the callbacks list records its effect


# --- settings applied before anything is built -----------------------------------------------------
def default_threads() -> int:
    """Cores this process may run on (affinity-aware); torch's intra-op pool should not exceed them."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)



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


def check_run_flags(config: Namespace) -> None:
    """One-line ValueErrors for the run-level flags ``--threads`` and ``--sitting_time``."""
    if config.threads is not None and config.threads < 1:
        raise ValueError(f"--threads {config.threads}: must be a positive integer (or leave it out: the cores available)")
    if config.get("sitting_time") is not None:
        sitting_seconds(config.sitting_time)


def trainer_part() -> dict[str, Any]:
    """``configs/trainer/default.yaml``: the logger, checkpointing, early stopping and cost callbacks of every fit."""
    return yaml.safe_load(TRAINER_PART.read_text())


def apply_callback_switches(config: Namespace) -> None:
    """``--early_stopping false`` and ``--trainer.enable_checkpointing false``: drop those callbacks from the list.

    The switch is consumed (the resolved ``trainer.callbacks``, which config.yaml records, says what runs). One-line
    ValueError for the ambiguous case: early stopping without checkpointing and a test after fitting (the test
    would score the weights ``patience`` validations past the best, not the best).
    """
    switch = config.pop(EARLY_STOPPING_KEY, None)
    callbacks = list(config.trainer.get("callbacks") or [])

    def named(callback: Any, cls: type) -> bool:
        path = str(callback.get("class_path", "")) if isinstance(callback, Namespace) else ""
        try:
            return path != "" and issubclass(import_class(path), cls)
        except (ImportError, AttributeError, ValueError):
            return False

    if switch is True and not any(named(cb, EarlyStopping) for cb in callbacks):
        raise ValueError("--early_stopping true: the config declares no EarlyStopping in trainer.callbacks "
                         "(configs/trainer/default.yaml shows one)")
    if switch is False:
        callbacks = [cb for cb in callbacks if not named(cb, EarlyStopping)]
    if config.trainer.get("enable_checkpointing") is False:
        callbacks = [cb for cb in callbacks if not named(cb, ModelCheckpoint)]
        if any(named(cb, EarlyStopping) for cb in callbacks) and config.get("test", True):
            raise ValueError("--trainer.enable_checkpointing false with early stopping on: the test after fitting "
                             "would score the weights of the last validation, not the best; add --early_stopping "
                             "false or --test false, or keep checkpointing")
    if config.trainer.get("callbacks") is not None or callbacks:
        config.trainer.callbacks = callbacks


def resume_callbacks(sitting_time: str | None) -> list[Callback]:
    """The callbacks that make a fit's sitting resumable exactly; ``seqrec.fit`` adds them to every fit, in this order.

    ``RNGStateCheckpoint`` (every RNG stream in each checkpoint), ``SignalCheckpoint`` (``last.ckpt`` after every
    validation; at SIGINT/SIGTERM or after ``--sitting_time`` a checkpoint at an exact resume point, exit
    130/143/75) and ``SittingMarker`` (where a resumed sitting starts in metrics.csv). They hold live process state
    (signal handlers, the sitting's clock), so they are built for the fit that runs rather than parsed from the
    config; configs/trainer/default.yaml names them and config.yaml's header lists them (``callbacks_header``).
    """
    limit = sitting_seconds(sitting_time) if sitting_time is not None else None
    return [RNGStateCheckpoint(), SignalCheckpoint(limit), SittingMarker()]


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
        parser.add_argument("--sitting_time", type=str | None, default=None,
                            help="end this sitting after DD:HH:MM:SS of training at an exact resume point (exit 75); "
                                 "continue with --ckpt_path last")
        parser.add_argument(f"--{EARLY_STOPPING_KEY}", type=bool | None, default=None,
                            help="false: drop the config's EarlyStopping; true: keep it (on a protocol that switches "
                                 "it off, turn it back on); checkpointing: --trainer.enable_checkpointing false")
        parser.link_arguments("data.num_items", "model.init_args.net.init_args.num_items", apply_on="instantiate")
        # the data's window (RecommendationData.max_len) into a network that takes one, when the config is parsed
        # (resolved configs show it; skipped when the network has no max_len)
        parser.link_arguments("data.init_args.max_len", "model.init_args.net.init_args.max_len", apply_on="parse")
        # item-feature models (MLP4Rec): names, kinds and vocabulary sizes from the data; skipped by jsonargparse
        # when the model has no feature_spec or the datamodule no item_feature_spec
        parser.link_arguments(
            "data.item_feature_spec", "model.init_args.net.init_args.feature_spec", apply_on="instantiate"
        )
        # every run reports what it cost (--macs.*, --memory.*, --throughput.*; values in configs/trainer/default.yaml)
        parser.add_lightning_class_args(MACsCallback, "macs")
        parser.add_lightning_class_args(MemoryCallback, "memory")
        parser.add_lightning_class_args(ThroughputCallback, "throughput")
        # a config that composes no protocol still logs to its run directory, with the trainer part's logger
        parser.set_defaults({"trainer.logger": trainer_part()["trainer"]["logger"]})

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
        """Threads, the strategy check and the run's name."""
        config = self.config
        config[COMPOSE_KEY] = None  # already expanded; a saved config.yaml must not compose again
        apply_callback_switches(config)
        check_values(config)
        check_run_flags(config)
        check_strategy(config.trainer)
        torch.set_num_threads(config.threads or default_threads())
        keep_freed_memory()
        name_run_logger(config, self.experiment)
        if self.adjust is not None:
            self.adjust(config)


class ParseOnly(SeqRecCLI):
    """Parses and validates a config (class paths, argument names and types) without building anything."""

    def before_instantiate_classes(self) -> None:
        """Check values and name the run as a real build would, but set nothing process-wide."""
        self.config[COMPOSE_KEY] = None
        apply_callback_switches(self.config)
        check_values(self.config)
        check_run_flags(self.config)
        name_run_logger(self.config, self.experiment)

    def instantiate_classes(self) -> None:
        """Build nothing."""


class SaveRunConfig(SaveConfigCallback):
    """config.yaml in the run directory, written atomically on rank 0, and origin.json beside it (where the run was
    made and its data paths, absolute: ``seqrec.runs.write_origin``, so that a moved run finds its data).

    A fit records the config that runs (``ckpt_path`` left out: how a sitting started is not part of the
    run); resuming checks first that it equals the saved one (``seqrec.resume.resolve_resume``). Its header
    comment lists every callback that ran (``callbacks_header``), those a fit adds included.
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
            write_text(path, callbacks_header(trainer) + self.parser.dump(config, skip_none=False))
            write_origin(Path(log_dir), config)
        self.already_saved = True


def describe_callback(callback: Callback) -> str:
    """``class_path`` of a callback, with what it watches for ModelCheckpoint and EarlyStopping."""
    cls = type(callback)
    text = f"{cls.__module__}.{cls.__qualname__}"
    if isinstance(callback, ModelCheckpoint):
        text += f" (monitor {callback.monitor}, mode {callback.mode}, save_last {callback.save_last})"
    elif isinstance(callback, EarlyStopping):
        text += f" (monitor {callback.monitor}, mode {callback.mode}, patience {callback.patience})"
    return text


def callbacks_header(trainer: L.Trainer) -> str:
    """A comment block for config.yaml: every callback of Lightning's and seqrec's the trainer runs, in the order
    Lightning calls them.

    The same in every sitting of a run (config.yaml does not change on resume): a per-sitting value such as
    ``--sitting_time`` is not shown, nor a callback a Python caller brings from elsewhere (a test's fault injector).
    """
    ours = [cb for cb in trainer.callbacks if type(cb).__module__.split(".")[0] in ("lightning", "seqrec")]
    lines = [f"#   {describe_callback(cb)}" for cb in ours]
    return "# callbacks every fit of this run runs (configs/trainer/default.yaml):\n" + "\n".join(lines) + "\n"


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
    expanded = rename_args(expanded)  # old spellings of the network's key (model -> net), one note each
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


def build_for_inference(args: list[str]) -> tuple[Namespace, L.LightningDataModule, L.LightningModule]:
    """(config, datamodule, task) of ``args``, linked as ``build`` links them, without a Trainer (``seqrec.load_run``):
    the same parser, checks and links; the trainer's arguments are parsed and checked, not instantiated."""

    def instantiate(self: SeqRecCLI) -> None:
        self.config_init = self.parser.instantiate_classes(self.config)
        self.datamodule, self.model = self._get(self.config_init, "data"), self._get(self.config_init, "model")

    cli = _cli(type("InferenceCLI", (SeqRecCLI,), {"instantiate_classes": instantiate}), args, save_config=False)
    return cli.config, cli.datamodule, cli.model


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
    if isinstance(task, RecommendationTask) and isinstance(datamodule, RecommendationData):
        task.bind_data(datamodule)
    return task
