"""What every task LightningModule shares: the injected network, the optimiser, id checks, the data binding, metric
logging; and what a task may declare besides (``RanksTargets``, ``ProbesMACs``).

A task receives its network (``net: torch.nn.Module``, a ``class_path`` in YAML: ``model.init_args.net``, on the
command line ``--model.net.d_model``) and the optimiser settings
once, here; subclasses pass them on with ``**optimizer_args`` so the config keys stay flat
(``model.init_args.lr``) and each task's signature (which jsonargparse reads as its config schema) lists
them through this class. It reads its data through ``seqrec.datamodules.base.RecommendationData``.

Optional capabilities are runtime-checkable Protocols; the MACs callback and the Python API ask
``isinstance(task, RanksTargets)`` / ``isinstance(task, ProbesMACs)``, never ``getattr``.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import Metric

from seqrec.datamodules.base import RecommendationData
from seqrec.models.base import ClozeRecommender, ItemFeatureConsumer
from seqrec.renamed_keys import rename_old_state_dict_keys
from seqrec.tasks.optim import build_optimizer


@runtime_checkable
class RanksTargets(Protocol):
    """A task that ranks each query's target among the catalogue or the batch's candidates (``NextItemTask``).

    ``mask_history``: a full-catalogue ranking leaves the query's history out; ``score_chunk_size``: items per
    chunk of the catalogue scan. The Python API and serving rank as the evaluation does through them.
    """

    mask_history: bool
    score_chunk_size: int

    def ranks(self, batch: dict[str, Tensor]) -> Tensor:
        """(B,) 1-based rank of each query's target (batch: ``items`` (B, L), ``target`` (B,), ``candidates`` (B, C)?)."""
        ...


@runtime_checkable
class ProbesMACs(Protocol):
    """A task that says what the MACs callback counts for one batch (``seqrec.callbacks.macs``).

    ``stage`` is "train" (a training step's forward) or "eval" (scoring the batch's queries). The returned
    tensors must be what that computation produces (a tuple is fine; None: nothing to count): fvcore traces only
    the operators that reach the outputs.
    """

    def macs_probe(self, batch: dict[str, Tensor], stage: str) -> Any:
        """The outputs of the computation to count on ``batch``."""
        ...


class RecommendationTask(L.LightningModule):
    """Base task: holds the network ``net`` and builds its optimiser (Adam/AdamW, decay / no-decay groups).

    A checkpoint written before the network was renamed (state_dict keys ``model.*``) loads as ``net.*`` with one
    note (``seqrec.renamed_keys``).

    Args:
        net: the ``nn.Module`` to train (next-item, CTR or language model).
        optimizer: "adam" or "adamw".
        lr, weight_decay, betas, eps: the optimiser's settings.
        no_decay: parameters whose names contain any of these get no weight decay (default "bias",
            "layer_norm": LRURec's rule; embeddings are decayed).
    """

    def __init__(
        self,
        net: nn.Module,
        optimizer: Literal["adam", "adamw"] = "adam",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        no_decay: list[str] | None = None,
    ) -> None:
        super().__init__()
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        self.net = net
        self.register_load_state_dict_pre_hook(rename_old_state_dict_keys)
        self.optimizer_settings = {"optimizer": optimizer, "lr": lr, "weight_decay": weight_decay,
                                   "betas": tuple(betas), "eps": eps, "no_decay": no_decay}

    def configure_optimizers(self) -> torch.optim.Optimizer | None:
        """Adam/AdamW with decay / no-decay groups; None for parameter-free models."""
        return build_optimizer(self.net.named_parameters(), **self.optimizer_settings)

    # --- checks and the data binding ------------------------------------------------------------
    def check_ids(self, *tensors: Tensor, inputs: bool = False) -> None:
        """ValueError when an item id falls outside the model's vocabulary 0..num_items (0 = padding); ``inputs``
        also admits a cloze model's ``[mask]`` id num_items + 1 (model inputs, never labels or candidates)."""
        n = self.net.num_items
        top = n + 1 if inputs and isinstance(self.net, ClozeRecommender) else n
        for t in tensors:
            if t.numel() and (int(t.min()) < 0 or int(t.max()) > top):
                raise ValueError(
                    f"item id out of range: found ids {int(t.min())}..{int(t.max())} but the model's "
                    f"vocabulary is 0..{top} (0 = padding). The model's num_items must equal the data's."
                )

    def bind_data(self, datamodule: RecommendationData) -> None:
        """Check the data's catalogue and training inputs against the model's; copy item-feature tables into a
        feature model."""
        data_items, model_items = datamodule.num_items, self.net.num_items
        if data_items != model_items:
            raise ValueError(
                f"the data has {data_items} items but the model was built for {model_items}: "
                "leave the model's num_items unset so the CLI links it from the data"
            )
        if isinstance(self.net, ClozeRecommender) and not datamodule.cloze_inputs:
            raise ValueError(
                f"{type(self.net).__name__} is trained by the cloze objective (masked items) but the data's "
                f"training inputs are not masked ({type(datamodule).__name__}): set data.init_args.train_mode: cloze"
            )
        if datamodule.cloze_inputs and not isinstance(self.net, ClozeRecommender):
            raise ValueError(
                f"data.init_args.train_mode cloze masks items with a [mask] token that {type(self.net).__name__} "
                "does not have: use train_mode windows (or prefix), or a cloze model (BERT4Rec)"
            )
        if isinstance(self.net, ItemFeatureConsumer):
            # feature models (MLP4Rec) hold the item-feature tables as buffers, copied once from the data
            self.net.set_item_features(datamodule.item_feature_tables())

    def setup(self, stage: str) -> None:
        """Bind the trainer's datamodule when it is a ``RecommendationData`` (fails early on a catalogue mismatch)."""
        datamodule = self._trainer.datamodule if self._trainer is not None else None
        if isinstance(datamodule, RecommendationData):
            self.bind_data(datamodule)

    def matmul_dtype(self) -> torch.dtype | None:
        """The autocast dtype of this module's device when mixed precision is on (``trainer.precision``), else None."""
        device = self.device.type
        return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None

    def log_metrics(self, prefix: str, metric: Metric | nn.Module, prog_bar: bool | None = None) -> None:
        """Log ``{prefix}/{name}`` for every value of ``metric.compute()`` (global sums and counts), then reset."""
        values = {f"{prefix}/{name}": value.float() for name, value in metric.compute().items()}
        self.log_dict(values, prog_bar=prefix == "val" if prog_bar is None else prog_bar)
        metric.reset()

    def check_finite(self, loss: Tensor) -> None:
        """FloatingPointError naming the step and the fixes when the training loss is not finite."""
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"training loss is {loss.item()} at step {self.global_step}: lower the learning rate, "
                "enable gradient clipping (trainer.gradient_clip_val) or check the data; the last saved "
                "checkpoint is intact"
            )
