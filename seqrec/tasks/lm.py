"""Language-model task: a next-item task over a vocabulary, scored on the last K words of each window.

A language model over word ids is a next-item model whose catalogue is the vocabulary, so training is
``NextItemTask``'s (full-softmax cross-entropy at every labelled position). Evaluation differs: each window
(``seqrec.datamodules.lm``) holds K = ``num_targets`` held-out words at its last K labelled positions, and this task
reports over those positions
- accuracy: the target scores strictly highest (ties count for the target, as ranks do everywhere here),
- perplexity: exp(Σ NLL / count), with NLL from a softmax over ids 1..N (padding excluded, as in training),
- per-horizon accuracy and perplexity (``accuracy_h1`` is the next word, ``h4`` four words ahead),
and the ranking metrics (``metrics``, default MAP@20) of the **next** word (horizon 1) among the full
vocabulary, without history masking (words repeat). Every value is an exact sum and count (DDP-safe).
"""

from __future__ import annotations

from typing import Any, Literal

from torch import Tensor

from seqrec.metrics.lm import LanguageModelMetrics
from seqrec.models.base import SequenceRecommender
from seqrec.tasks.catalogue import catalogue_scan
from seqrec.tasks.next_item import NextItemTask
from seqrec.tasks.padding import drop_padding


class LanguageModelTask(NextItemTask):
    """NextItemTask for language modelling: same training; evaluation over the last ``num_targets`` positions.

    Logged keys: ``{val,test}/accuracy``, ``/perplexity``, ``/accuracy_h{k}``, ``/perplexity_h{k}`` and the
    ranking metrics of the next word (``{val,test}/map@20`` by default).
    """

    def __init__(
        self,
        net: SequenceRecommender,
        num_targets: int = 4,
        loss: Literal["ce", "bce"] = "ce",
        num_negatives: int = 1,
        metrics: list[str] | None = None,
        score_chunk_size: int = 65536,
        **optimizer_args: Any,
    ) -> None:
        super().__init__(
            net, loss=loss, num_negatives=num_negatives, metrics=metrics or ["map@20"], mask_history=False,
            score_chunk_size=score_chunk_size, **optimizer_args,
        )
        if num_targets < 1:
            raise ValueError(f"num_targets must be >= 1, got {num_targets}")
        self.num_targets = num_targets
        self.val_lm = LanguageModelMetrics(num_targets)
        self.test_lm = LanguageModelMetrics(num_targets)

    def target_statistics(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(NLL (B, K), ranks (B, K)) of the K targets in the last K positions of each window."""
        items, labels = batch["items"], batch["labels"]  # (B, L), (B, L)
        K = self.num_targets
        targets = labels[:, -K:]  # (B, K)
        if bool((targets <= 0).any()) or bool((labels[:, :-K] != 0).any()):
            raise ValueError(
                f"evaluation windows must label exactly their last {K} positions (num_targets={K}); check that "
                "the data module's num_targets equals the task's"
            )
        self.check_ids(items, targets)
        hidden = self.net(items)[:, -K:]  # (B, K, d)
        ranks, nll = catalogue_scan(
            self.net, hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1), None, self.score_chunk_size,
            with_nll=True,
        )
        return nll.view(-1, K), ranks.view(-1, K)

    def ranks(self, batch: dict[str, Tensor]) -> Tensor:
        """1-based rank of each window's next word (horizon 1); all K targets are scored, as evaluation does."""
        return self.target_statistics(batch)[1][:, 0]

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate validation statistics."""
        nll, ranks = self.target_statistics(drop_padding(batch))
        self.val_lm.update(nll, ranks)
        self.val_metrics.update(ranks[:, 0])

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate test statistics."""
        nll, ranks = self.target_statistics(drop_padding(batch))
        self.test_lm.update(nll, ranks)
        self.test_metrics.update(ranks[:, 0])

    def on_validation_epoch_end(self) -> None:
        """Log ``val/*`` and reset."""
        self.log_metrics("val", self.val_lm, prog_bar=False)
        super().on_validation_epoch_end()

    def on_test_epoch_end(self) -> None:
        """Log ``test/*`` and reset."""
        self.log_metrics("test", self.test_lm, prog_bar=False)
        super().on_test_epoch_end()
