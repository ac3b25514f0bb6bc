"""EvoRNN: an evolutive recurrent network whose hidden size grows from the oldest to the newest events.

Belletti, Chen & Chi, "Quantifying Long Range Dependence in Language and User Behavior to improve RNNs",
KDD 2019 (arXiv 1905.09414). No official code is public; this is a construction from the abstract and
PROTOCOLS.md §3, with every unknown made an option. Positions are counted by their distance τ from the end
of the window (τ = 1 is the newest event, the one the prediction is made from)::

    segments k = 1..K, oldest → newest, hidden sizes h_1 ≤ … ≤ h_K (growing is the point; not enforced)
    x_t = Dropout(E[item_t])                                          # (B, d) shared embedding
    within segment k:  s_t = GRUCell_k(x_t, s_{t−1})   (s unchanged at padding)   s ∈ R^{h_k}
    entering segment k+1:  s ← W_k s,  W_k ∈ R^{h_{k+1} × h_k}, no bias, initialised [I; 0]
    output at t in segment k:  o_t = R_k(Dropout(s_t)),  R_k = I if h_k = d else Linear(h_k → d)
    scores = o_t Eᵀ                                                   # tied item table

Assumptions (not in the abstract, chosen here, documented and configurable):
- GRU cells (PyTorch's gate layout); one cell per segment, not shared, all fed by the same embedding.
- The carried state is a learned linear map without bias, so an empty history (padding only) stays the
  exact zero state across a boundary, and identity-padded initialisation starts as "copy the small state
  into the first h_k units of the large one" (``projection_init="identity"``; "orthogonal" is the alternative).
- Segment boundaries are distances from the end of the window, so the newest events always get the
  largest cell, whatever the history length; a window shorter than the schedule starts in a newer segment.
- Capacity schedules:
  * "segments": explicit ``hidden_sizes`` (oldest → newest) and ``segment_lengths`` (the lengths of the
    K−1 newer segments, oldest → newest; the oldest segment takes every older position).
  * "power_law": the per-step cost of the cell follows the correlation decay of a long-range-dependent
    sequence, cost(τ) ∝ τ^{2·lrd_d − 1} (autocovariance γ(τ) ∝ τ^{2d−1}; ``lrd_d`` from
    ``python -m seqrec.tools.lrd``), quantised into levels whose costs shrink by ``cost_ratio`` each
    (``power_law_schedule``): level j is used for τ ≥ cost_ratio^{j / (1 − 2d)}.
  With a single segment the model is exactly a fixed-size GRU (the reference it is compared with).
- Serving: because capacity is assigned by distance from the newest event, every new event moves every
  older one to a new distance, so a request re-encodes the window (no recurrent state is carried between
  requests); ``serving_macs`` is that per-request cost.
- Cost accounting (``op_counts``): multiply-accumulates of the matrix products. A GRU step with input d
  and hidden h costs 3h(d + h) MACs (the two gate products W_ih x and W_hh s), a boundary h_k·h_{k+1},
  a readout h·d when h ≠ d. ``serving_macs`` encodes one sequence and reads out its newest position
  (what a served model runs per request, and what results/EVORNN.md reports); ``macs_per_sequence``
  is ``forward``'s count with a readout at every position (``seqrec.models.base.DeclaresMACs``). Element-wise gate arithmetic (O(h) per step) and bias additions are not counted (the
  convention of FLOP counters such as ``torch.utils.flop_counter``); scoring the catalogue is
  ``scoring_macs()`` = N·d, reported separately.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from seqrec.models.base import SequenceRecommender, require_positive, truncated_normal_
from seqrec.models.layers import Dropout

Schedule = Literal["segments", "power_law"]


def gru_step_macs(input_size: int, hidden_size: int) -> int:
    """MACs of one GRU step: W_ih x (3h × d) plus W_hh s (3h × h) = 3h(d + h)."""
    return 3 * hidden_size * (input_size + hidden_size)


def _hidden_for_cost(cost: float, input_size: int) -> float:
    """Hidden size h whose step cost 3h(d + h) equals ``cost``: h = (−d + √(d² + 4·cost/3)) / 2."""
    return (-input_size + math.sqrt(input_size**2 + 4.0 * cost / 3.0)) / 2.0


def power_law_schedule(
    max_len: int,
    max_hidden: int,
    lrd_d: float,
    input_size: int,
    min_hidden: int = 8,
    cost_ratio: float = 2.0,
    size_multiple: int = 8,
    scale: float = 1.0,
) -> tuple[list[int], list[int]]:
    """Segments whose per-step cost decays like the autocovariance, cost(τ) = c_0 · min(1, (τ/τ_0)^{2d−1}).

    Level j (j = 0 for the newest events) has a target step cost c_0 / r^j with c_0 = 3h_max(d_in + h_max)
    and r = ``cost_ratio``; its hidden size solves 3h(d_in + h) = c_0 / r^j, rounded up to a multiple of
    ``size_multiple`` (so the realised cost is never below the power law) and floored at ``min_hidden``.
    Distance τ (1 = newest) uses level j = ⌊(1 − 2d) · log_r(τ/τ_0)⌋ (0 for τ ≤ τ_0), i.e. level j starts
    at τ_j = ⌈τ_0 · r^{j/(1−2d)}⌉; τ_0 = ``scale`` (default 1: the decay starts after the newest event). Levels that round to the same size merge; levels beyond ``max_len`` are dropped.
    Returns (hidden_sizes oldest → newest, segment_lengths of the K−1 newer segments oldest → newest).
    d ≥ 0.5 (no decay: non-stationary) gives one segment of ``max_hidden``.
    """
    if not -0.5 < lrd_d < 1.0:
        raise ValueError(f"lrd_d must lie in (-0.5, 1) (stationary long memory: 0 < d < 0.5), got {lrd_d}")
    if cost_ratio <= 1.0:
        raise ValueError(f"cost_ratio must be > 1 (each level cheaper than the last), got {cost_ratio}")
    if scale < 1.0:
        raise ValueError(f"scale (τ_0, the distance where the decay starts) must be >= 1, got {scale}")
    if not 1 <= min_hidden <= max_hidden:
        raise ValueError(f"need 1 <= min_hidden <= max_hidden, got min_hidden={min_hidden}, max_hidden={max_hidden}")
    if lrd_d >= 0.5:
        return [max_hidden], []
    top_cost = gru_step_macs(input_size, max_hidden)
    levels: list[tuple[int, int]] = []  # (τ at which the level starts, hidden size), newest first
    j = 0
    while True:
        start = 1 if j == 0 else math.ceil(scale * cost_ratio ** (j / (1.0 - 2.0 * lrd_d)) - 1e-9)
        if start > max_len:
            break
        raw = _hidden_for_cost(top_cost / cost_ratio**j, input_size)
        size = min(max_hidden, max(min_hidden, size_multiple * math.ceil(raw / size_multiple - 1e-9)))
        if levels and start == levels[-1][0]:
            levels.pop()  # a cheaper level starts at the same τ: it replaces the previous one
        if not levels or size != levels[-1][1]:  # equal sizes (after rounding) merge into one segment
            levels.append((start, size))
        if size <= min_hidden:
            break
        j += 1
    sizes = [size for _, size in levels]
    # level i covers τ in [start_i, start_{i+1}); the oldest level takes every older position
    lengths_newest_first = [levels[i + 1][0] - levels[i][0] for i in range(len(levels) - 1)]
    return sizes[::-1], lengths_newest_first[::-1]


class EvoRNN(SequenceRecommender):
    """Recurrent next-item model with a capacity schedule over time (module docstring).

    Args:
        num_items: catalogue size N (ids 1..N, 0 = padding); linked from the data.
        max_len: window length L (copied from the data); schedules are checked against it.
        d_model: embedding and scoring width d.
        schedule: "segments" (explicit) or "power_law" (from ``lrd_d``).
        hidden_sizes: "segments": sizes oldest → newest; "power_law": only the last (newest) size is used.
        segment_lengths: "segments": lengths of the K−1 newer segments, oldest → newest.
        lrd_d: "power_law": the long-range-dependence exponent d (autocovariance ∝ τ^{2d−1}).
        min_hidden, cost_ratio, size_multiple, power_law_scale: "power_law" quantisation and the distance
            τ_0 where the decay starts (``power_law_schedule``).
        dropout: on the embedding and before the readout.
        projection_init: "identity" ([I; 0]) or "orthogonal" for the carried-state maps W_k.
    """

    def __init__(
        self,
        num_items: int,
        max_len: int = 50,
        d_model: int = 64,
        schedule: Schedule = "segments",
        hidden_sizes: list[int] | None = None,
        segment_lengths: list[int] | None = None,
        lrd_d: float | None = None,
        min_hidden: int = 8,
        cost_ratio: float = 2.0,
        size_multiple: int = 8,
        power_law_scale: float = 1.0,
        dropout: float = 0.1,
        projection_init: Literal["identity", "orthogonal"] = "identity",
    ) -> None:
        super().__init__()
        require_positive(num_items=num_items, max_len=max_len)
        hidden_sizes = list(hidden_sizes) if hidden_sizes else [d_model]
        if schedule == "power_law":
            if lrd_d is None:
                raise ValueError(
                    "schedule='power_law' needs lrd_d, the long-range-dependence exponent: estimate it with "
                    "`python -m seqrec.tools.lrd --config <your config>` and pass model.init_args.lrd_d"
                )
            hidden_sizes, segment_lengths = power_law_schedule(
                max_len, hidden_sizes[-1], lrd_d, d_model, min_hidden, cost_ratio, size_multiple, power_law_scale
            )
        elif schedule == "segments":
            segment_lengths = list(segment_lengths or [])
        else:
            raise ValueError(f"schedule must be 'segments' or 'power_law', got {schedule!r}")
        self._check_schedule(hidden_sizes, segment_lengths, max_len)
        self.num_items, self.max_len, self.d_model = num_items, max_len, d_model
        self.schedule = schedule
        self.hidden_sizes: list[int] = [int(h) for h in hidden_sizes]
        self.segment_lengths: list[int] = [int(n) for n in segment_lengths]
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.dropout = Dropout(dropout)
        self.cells = nn.ModuleList(nn.GRUCell(d_model, h) for h in self.hidden_sizes)
        self.projections = nn.ModuleList(
            nn.Linear(a, b, bias=False) for a, b in zip(self.hidden_sizes[:-1], self.hidden_sizes[1:])
        )
        self.readouts = nn.ModuleList(
            nn.Identity() if h == d_model else nn.Linear(h, d_model) for h in self.hidden_sizes
        )
        self.projection_init = projection_init
        self.reset_parameters()

    @staticmethod
    def _check_schedule(hidden_sizes: list[int], segment_lengths: list[int], max_len: int) -> None:
        if any(h < 1 for h in hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive, got {hidden_sizes}")
        if len(segment_lengths) != len(hidden_sizes) - 1:
            raise ValueError(
                f"segment_lengths must give the lengths of the {len(hidden_sizes) - 1} newer segment(s) "
                f"(the oldest segment takes the rest), got {len(segment_lengths)} for hidden_sizes={hidden_sizes}"
            )
        if any(n < 1 for n in segment_lengths):
            raise ValueError(f"segment_lengths must be positive, got {segment_lengths}")
        if sum(segment_lengths) >= max_len and segment_lengths:
            raise ValueError(
                f"segment_lengths {segment_lengths} cover {sum(segment_lengths)} >= max_len={max_len} positions, "
                "so the oldest segment would never run: shorten them or raise data.max_len"
            )

    def reset_parameters(self) -> None:
        """Embedding N(0, 0.02²) truncated at ±0.04 (padding row 0); GRU/readouts PyTorch's default; W_k per init."""
        truncated_normal_(self.item_embedding.weight)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()
            for projection in self.projections:
                if self.projection_init == "identity":
                    projection.weight.copy_(torch.eye(*projection.weight.shape))
                elif self.projection_init == "orthogonal":
                    nn.init.orthogonal_(projection.weight)
                else:
                    raise ValueError(f"projection_init must be 'identity' or 'orthogonal', got {self.projection_init!r}")

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table."""
        return self.item_embedding.weight

    # --- schedule ---------------------------------------------------------------------------------
    def segment_spans(self, length: int) -> list[tuple[int, int, int]]:
        """(segment k, start, stop) positions of a window of ``length`` (newest at length−1), oldest first."""
        spans = []
        stop = length
        for k in range(len(self.hidden_sizes) - 1, -1, -1):
            start = 0 if k == 0 else max(0, stop - self.segment_lengths[k - 1])
            if stop > start:
                spans.append((k, start, stop))
            stop = start
            if stop == 0:
                break
        return spans[::-1]

    # --- computation ------------------------------------------------------------------------------
    def _states(self, items: Tensor, readout: Literal["all", "last"]) -> Tensor:
        """Run the schedule over items (B, L); outputs (B, L, d) for "all", (B, d) for "last"."""
        B, L = items.shape
        x = self.dropout(self.item_embedding(items))  # (B, L, d)
        real = (items != 0).unsqueeze(-1)  # (B, L, 1)
        spans = self.segment_spans(L)
        outputs: list[Tensor] = []
        state: Tensor | None = None
        previous = None
        for k, start, stop in spans:
            if state is None:
                state = x.new_zeros(B, self.hidden_sizes[k])  # (B, h_k)
            else:
                for j in range(previous, k):  # carry across every boundary between them
                    state = self.projections[j](state)  # (B, h_{j+1})
            cell = self.cells[k]
            segment_states = []
            for t in range(start, stop):
                state = torch.where(real[:, t], cell(x[:, t], state), state)  # (B, h_k)
                if readout == "all":
                    segment_states.append(state)
            if readout == "all":
                stacked = torch.stack(segment_states, dim=1)  # (B, stop − start, h_k)
                outputs.append(self.readouts[k](self.dropout(stacked)))  # (B, stop − start, d)
            previous = k
        if readout == "last":
            return self.readouts[previous](self.dropout(state))  # (B, d)
        return torch.cat(outputs, dim=1)  # (B, L, d)

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded ids -> hidden (B, L, d); padding never changes the state."""
        if items.shape[1] > self.max_len:
            raise ValueError(f"sequence length {items.shape[1]} exceeds max_len={self.max_len} of the schedule")
        return self._states(items, "all")

    def last_hidden(self, items: Tensor) -> Tensor:
        """Serving path: items (B, L) -> (B, d) output at the newest position only (no other readouts)."""
        if items.shape[1] > self.max_len:
            raise ValueError(f"sequence length {items.shape[1]} exceeds max_len={self.max_len} of the schedule")
        return self._states(items, "last")

    # --- cost -------------------------------------------------------------------------------------
    def readout_macs(self, hidden_size: int) -> int:
        """MACs of one position's readout: h·d, or 0 when h = d (identity)."""
        return 0 if hidden_size == self.d_model else hidden_size * self.d_model

    def op_counts(self, seq_len: int | None = None) -> dict[str, int]:
        """MACs for one sequence of ``seq_len`` real events (default max_len), by part.

        recurrent = Σ_τ 3h(τ)(d + h(τ)); projections = Σ h_k h_{k+1} over the boundaries the window crosses;
        readout_last = h_K·d (0 when h_K = d), readout_all = Σ_τ h(τ)·d over positions whose h ≠ d;
        serving = recurrent + projections + readout_last (encode, output at the end: ``last_hidden``);
        forward = recurrent + projections + readout_all (``forward``: an output at every position);
        scoring = (N + 1)·d for the full catalogue.
        """
        length = self.max_len if seq_len is None else seq_len
        if not 1 <= length <= self.max_len:
            raise ValueError(f"seq_len must lie in 1..max_len={self.max_len}, got {length}")
        spans = self.segment_spans(length)
        sizes = [self.hidden_sizes[k] for k, _, _ in spans]
        steps = [stop - start for _, start, stop in spans]
        recurrent = sum(gru_step_macs(self.d_model, h) * n for h, n in zip(sizes, steps))
        projections = sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
        readout_last = self.readout_macs(sizes[-1])
        readout_all = sum(self.readout_macs(h) * n for h, n in zip(sizes, steps))
        return {
            "recurrent": recurrent,
            "projections": projections,
            "readout_last": readout_last,
            "readout_all": readout_all,
            "serving": recurrent + projections + readout_last,
            "forward": recurrent + projections + readout_all,
            "scoring": self.scoring_macs(),
        }

    def macs_per_sequence(self, seq_len: int | None = None) -> int:
        """MACs of ``forward`` on one sequence of ``seq_len`` items, all positions read out, no scoring.

        ``seqrec.models.base.DeclaresMACs``; ``serving_macs`` is the cost of ``last_hidden``.
        """
        return self.op_counts(seq_len)["forward"]

    def serving_macs(self, seq_len: int | None = None) -> int:
        """MACs to encode one sequence and read out only its newest position (``last_hidden``; no scoring)."""
        return self.op_counts(seq_len)["serving"]

    def scoring_macs(self) -> int:
        """MACs to score the full catalogue from one hidden state: (N + 1)·d (the padding row included)."""
        return (self.num_items + 1) * self.d_model
