"""MLP4Rec (Li et al., IJCAI 2022): all-MLP mixing along the sequence, the embedding channels and the item features.

Read from the official code (github Li-Muyang/MLP4Rec, ``recbole/model/sequential_recommender/mlp4rec.py``),
written anew here. The input stacks F + 1 "feature channels" per position, X ∈ R^{(F+1)×B×L×d}: channel 0
the item embedding, channel f the embedding of the item's f-th feature (token: lookup; token
sequence: masked mean of its token embeddings; float: value × a learned vector). Every mixer is a
pre-norm residual MLP, x + MLP(LayerNorm_d(x)), with MLP(n) = Dropout(Linear(4n→n) Dropout(GELU(Linear(n→4n)))):

- sequence mixer: the MLP runs along the L positions (one d-wide LayerNorm, then mixing across positions);
- channel mixer: the MLP runs along d;
- feature mixer: the MLP runs across the F + 1 channels.

One layer: for every channel f, X[f] ← channel_mix(sequence_mix(X[f])); then X ← feature_mix(X). After
``num_layers`` layers the output is LayerNorm(X[0]); scores are tied to the item embedding.

Choices and deviations (each an option):
- ``share_mixers=True`` (official): one sequence, one channel and one feature mixer serve every channel
  and every layer (the official code appends the same two mixer objects for every channel and reuses them
  in each layer). ``False`` gives each layer its own three mixers (still shared across channels).
- ``causal=False`` (official): position t's sequence mixing reads every position, later ones included.
  This is harmless for MLP4Rec's protocol, where each training example is one prefix with its single label
  after the last position (nothing later than the output position exists), but it rules out training with
  labels at every position (``train_mode: windows``), where position t would see its own label as the
  input at t + 1: the task refuses such batches for a non-causal model. ``causal=True`` masks both
  sequence-mixing weight matrices MADE-style (hidden unit k belongs to position k // 4; W1 lets it read
  positions ≤ k // 4, W2 lets output j read hidden units of positions ≤ j), so output t depends on inputs
  ≤ t only.
- Padding: the data are left-padded (newest item at L - 1). ``padding_side="right"`` (the official RecBole
  behaviour) moves each row's items to positions 0..n-1 before mixing and reads the newest item's hidden
  at position n - 1 (returned at L - 1, where the task reads it); since the sequence mixer has one weight
  per absolute position, the two sides give different functions. ``"left"`` mixes the left-padded rows as
  they come. With ``mask_padding=True`` every channel is zeroed at padded positions at the input and after
  every mixer, so padded positions carry no content into real ones (only the sequence mixer's fixed
  per-position bias remains). ``False`` is the official behaviour (padding rows evolve like real ones).
- LayerNorm epsilon: ``mixer_layer_norm_eps`` for the mixers' pre-norms (official 1e-5, PyTorch's default
  there), ``layer_norm_eps`` for the final LayerNorm (official 1e-12, RecBole's config).
- Initialisation as the official code: embeddings and channel-mixer Linears N(0, 0.02), biases 0;
  sequence and feature mixers keep PyTorch's default (they are ``Conv1d(kernel_size=1)`` there, which
  RecBole's initialiser skips). ``zero_padding_row=False`` (official) leaves the N(0, 0.02) draw in the
  padding rows of the item and token embeddings (RecBole's initialiser overwrites them; ``padding_idx``
  keeps them frozen); ``True`` zeroes them.
- The official settings are the default of the ``mlp4rec_*`` configs (``padding_side: right``,
  ``mask_padding: false``, ``mixer_layer_norm_eps: 1e-5``, ``zero_padding_row: false``, and the release
  year as a category); this class's defaults keep the earlier left-padded, masked variant.
- ``mixer_layout="positions_first"`` (default) stacks the channels as (L, C, B, d): each mixer's product is
  one matrix product over a view (the sequence mixer W (4L × L) @ X.view(L, C·B·d)) instead of a product
  broadcast over C × B, and GELU, the first dropout and fc2 form one autograd node that keeps 5 instead of 9
  bytes per 4×-expanded element. ``"reference"`` is the earlier (C, B, L, d) path with plain autograd, the
  same function (equal outputs and gradients to float tolerance; the dropout masks are drawn in another
  order, so a seeded run's masks differ). ``mixer_recompute=True`` keeps 1 byte per expanded element (the
  dropout mask) and recomputes fc1's product in backward: about a quarter less peak memory for one more
  matrix product per mixer.
- ``checkpoint_layers=True`` keeps only each mixer layer's input during training and recomputes the
  layer in the backward pass (same dropout masks): the same gradients for about a third more arithmetic,
  and the 4×-expanded activations of only one layer in memory at a time.
- The item-feature tables are model buffers (``set_item_features``, called once by the task with the
  datamodule's tables), so a batch carries item ids only and a checkpoint is self-contained.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from seqrec.models.base import SequenceRecommender
from seqrec.models.layers import Dropout, apply_mask_, keep_mask

FEATURE_KINDS = ("token", "token_seq", "float")


LAYOUTS = ("positions_first", "reference")
# where each mixer's axis lies in the stacked tensor, per layout
AXIS_DIM = {
    "reference": {"sequence": 2, "channel": 3, "feature": 0},  # (C, B, L, d)
    "positions_first": {"sequence": 0, "channel": 3, "feature": 1},  # (L, C, B, d)
}


def axis_product(axis: str, y: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """The mixer's Linear along ``axis`` of the positions-first tensor y (L, C, B, d): out = W y + b along that axis.

    Each is one matrix product over a view, with no copy of y and no broadcast copy of W:
    sequence: W (L', L) @ y.view(L, C·B·d); channel: y.view(-1, d) @ Wᵀ; feature: W (C', C) @ y[l].view(C, B·d)
    for every position l (a batched product whose batch is L).
    """
    if axis == "channel":
        return F.linear(y, weight, bias)  # (..., d) -> (..., d')
    if axis == "sequence":
        L = y.shape[0]
        out = torch.addmm(bias.unsqueeze(-1), weight, y.reshape(L, -1))  # (L', C·B·d)
        return out.view(weight.shape[0], *y.shape[1:])
    L, C = y.shape[:2]
    # bmm with the weight broadcast over L (a stride-0 view): torch.matmul(2-D, 3-D) folds the product into one mm
    # over y's transpose, which copies y and then its (L, C', B·d) result: about 1.2 s of each official-size step
    out = torch.baddbmm(bias.view(1, -1, 1), weight.expand(L, -1, -1), y.reshape(L, C, -1))  # (L, C', B·d)
    return out.view(L, weight.shape[0], *y.shape[2:])


def axis_product_backward(axis: str, grad: Tensor, y: Tensor, weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of ``axis_product``: (∂/∂y, ∂/∂W, ∂/∂b) for out = W y + b along ``axis``, given grad = ∂/∂out.

    ∂y = Wᵀ grad, ∂W = Σ grad yᵀ, ∂b = Σ grad, the sums over every index but the axis.
    """
    if axis == "channel":
        g, x = grad.reshape(-1, grad.shape[-1]), y.reshape(-1, y.shape[-1])  # (N, d'), (N, d)
        return (g @ weight).view(y.shape), g.t() @ x, g.sum(0)
    if axis == "sequence":
        L2, L = weight.shape
        g, x = grad.reshape(L2, -1), y.reshape(L, -1)  # (L', M), (L, M)
        return (weight.t() @ g).view(y.shape), g @ x.t(), g.sum(1)
    L, C = y.shape[:2]
    g, x = grad.reshape(L, weight.shape[0], -1), y.reshape(L, C, -1)  # (L, C', M), (L, C, M)
    d_y = torch.bmm(weight.t().expand(L, -1, -1), g)  # (L, C, M), no copy of g (see axis_product)
    return d_y.view(y.shape), torch.bmm(g, x.transpose(1, 2)).sum(0), g.sum((0, 2))


class _ExpandMLP(torch.autograd.Function):
    """The mixer's MLP along its axis as one autograd node: h = W₁ z + b₁, y = GELU(h) ⊙ m · s, out = W₂ y + b₂
    (m the boolean dropout mask, s = 1/(1 − p); m = None without dropout).

    Autograd would keep z (fc1's input), h (GELU's), m and y (fc2's): 9 bytes per element of the 4×-expanded
    activations, which MLP4Rec at its official size holds for 4 layers × 3 mixers. This node keeps z, h and m
    (5 bytes per expanded element) and recomputes y in backward; with ``recompute_hidden`` it keeps z and m
    only (1 byte) and recomputes h = W₁ z + b₁ too, one more product for about 4 bytes less per element.
    Backward: ∂W₂ = Σ g yᵀ, ∂y = W₂ᵀ g, ∂h = GELU'(h) ⊙ m · s ⊙ ∂y (aten's fused ``gelu_backward``),
    ∂W₁ = Σ ∂h zᵀ, ∂b₁ = Σ ∂h, ∂z = W₁ᵀ ∂h. Written by hand because no library op fuses a Linear with the
    element-wise work around it for backward; the products stay torch's GEMMs (``axis_product``).
    """

    @staticmethod
    def forward(ctx, z: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, keep: Tensor | None, scale: float,  # noqa: ANN001
                axis: str, recompute_hidden: bool) -> Tensor:
        """z (..., n along the axis, ...) -> out, the same shape."""
        h = axis_product(axis, z, w1, b1)  # n -> e·n
        y = F.gelu(h)
        if keep is not None:
            apply_mask_(y, keep, scale)
        ctx.save_for_backward(z, w1, b1, w2, keep, None if recompute_hidden else h)
        ctx.scale, ctx.axis = scale, axis
        return axis_product(axis, y, w2, b2)  # e·n -> n

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: ANN001, ANN205 (autograd signature)
        """(∂z, ∂W₁, ∂b₁, ∂W₂, ∂b₂) from the recomputed activations (class docstring)."""
        z, w1, b1, w2, keep, h = ctx.saved_tensors
        if h is None:
            h = axis_product(ctx.axis, z, w1, b1)
        y = F.gelu(h)
        if keep is not None:
            apply_mask_(y, keep, ctx.scale)
        d_y, d_w2, d_b2 = axis_product_backward(ctx.axis, grad.contiguous(), y, w2)
        del y
        if keep is not None:
            apply_mask_(d_y, keep, ctx.scale)
        d_h = torch.ops.aten.gelu_backward(d_y, h)
        del d_y, h
        d_z, d_w1, d_b1 = axis_product_backward(ctx.axis, d_h, z, w1)
        return d_z, d_w1, d_b1, d_w2, d_b2, None, None, None, None


class MixerMLP(nn.Module):
    """x + MLP(LayerNorm(x)) with the MLP acting along one axis of size n: Linear(n→en), GELU, Dropout, Linear(en→n), Dropout.

    x is the stacked tensor of the model's ``layout``: "positions_first" (L, C, B, d), where every axis's
    product is one matrix product over a view and the MLP runs as one autograd node that saves 5 (or, with
    ``recompute_hidden``, 1) instead of 9 bytes per expanded element (``_ExpandMLP``); or "reference" (C, B, L, d)
    with plain autograd, the earlier path kept to check the fused one against. ``axis`` is "sequence" (L),
    "channel" (d) or "feature" (C). The LayerNorm is always over d, as in the official ``PreNormResidual``.
    ``causal`` (sequence axis only) masks both weights so that output j reads inputs ≤ j.
    """

    def __init__(
        self, axis: str, size: int, d_model: int, expansion: int, dropout: float, eps: float, causal: bool = False,
        layout: str = "reference", recompute_hidden: bool = False,
    ) -> None:
        super().__init__()
        if axis not in ("sequence", "channel", "feature"):
            raise ValueError(f"axis must be 'sequence', 'channel' or 'feature', got {axis!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.axis, self.layout, self.recompute_hidden = axis, layout, recompute_hidden
        self.layer_norm = nn.LayerNorm(d_model, eps=eps)
        self.fc1 = nn.Linear(size, size * expansion)
        self.fc2 = nn.Linear(size * expansion, size)
        self.dropout = Dropout(dropout)
        self.causal = causal
        if causal:
            owner = torch.arange(size * expansion) // expansion  # position each hidden unit belongs to
            position = torch.arange(size)
            self.register_buffer("mask1", (position.unsqueeze(0) <= owner.unsqueeze(1)).float(), persistent=False)
            self.register_buffer("mask2", (owner.unsqueeze(0) <= position.unsqueeze(1)).float(), persistent=False)

    def _reference_linear(self, y: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        if self.axis == "channel":
            return F.linear(y, weight, bias)  # (..., d) -> (..., d')
        if self.axis == "sequence":
            return torch.matmul(weight, y) + bias.unsqueeze(-1)  # (C, B, L, d) -> (C, B, L', d)
        C = y.shape[0]
        out = torch.addmm(bias.unsqueeze(-1), weight, y.reshape(C, -1))  # (C', B·L·d)
        return out.view(weight.shape[0], *y.shape[1:])  # (C', B, L, d)

    def forward(self, x: Tensor) -> Tensor:
        """x (C, B, L, d) or (L, C, B, d) by ``layout`` -> the same shape."""
        w1, w2 = self.fc1.weight, self.fc2.weight
        if self.causal:
            w1, w2 = w1 * self.mask1, w2 * self.mask2
        if self.layout == "reference":
            y = self.dropout(F.gelu(self._reference_linear(self.layer_norm(x), w1, self.fc1.bias)))  # n -> e·n
            return x + self.dropout(self._reference_linear(y, w2, self.fc2.bias))  # e·n -> n
        z = self.layer_norm(x)
        # mixed precision: plain autograd tracks the casts; a jit trace (fvcore's MACs count) sees through plain
        # ops only, not into an autograd Function: the same function, the same masks, drawn in the same order
        if torch.is_autocast_enabled(x.device.type) or torch.jit.is_tracing():
            y = self.dropout(F.gelu(axis_product(self.axis, z, w1, self.fc1.bias)))  # n -> e·n along the axis
            return x + self.dropout(axis_product(self.axis, y, w2, self.fc2.bias))  # e·n -> n
        expanded = list(z.shape)
        expanded[AXIS_DIM[self.layout][self.axis]] = self.fc1.out_features
        keep, scale = keep_mask(expanded, z.device, self.dropout.p) if self.training else (None, 1.0)
        out = _ExpandMLP.apply(z, w1, self.fc1.bias, w2, self.fc2.bias, keep, scale, self.axis, self.recompute_hidden)
        return x + self.dropout(out)


class MixerLayer(nn.Module):
    """One set of sequence, channel and feature mixers."""

    def __init__(
        self, max_len: int, d_model: int, channels: int, expansion: int, dropout: float, eps: float, causal: bool,
        layout: str = "reference", recompute_hidden: bool = False,
    ) -> None:
        super().__init__()
        kw = dict(layout=layout, recompute_hidden=recompute_hidden)
        self.sequence_mixer = MixerMLP("sequence", max_len, d_model, expansion, dropout, eps, causal, **kw)
        self.channel_mixer = MixerMLP("channel", d_model, d_model, expansion, dropout, eps, **kw)
        self.feature_mixer = MixerMLP("feature", channels, d_model, expansion, dropout, eps, **kw)

    def forward(self, x: Tensor, keep: Tensor | None) -> Tensor:
        """x (C, B, L, d) or (L, C, B, d); keep broadcastable to x ((B, L, 1) or (L, 1, B, 1)) or None -> x's shape."""
        x = self.sequence_mixer(x)  # along L, each channel alike
        x = x if keep is None else x * keep
        x = self.channel_mixer(x)  # along d
        x = x if keep is None else x * keep
        x = self.feature_mixer(x)  # across the C = F + 1 channels
        return x if keep is None else x * keep


class ItemFeatureEncoder(nn.Module):
    """One item feature: its (N + 1, ...) table as a buffer and its embedding into R^d.

    token: E[t]; token_seq: Σ_j m_j E[t_j] / max(Σ_j m_j, 1) with m_j = 1[t_j ≠ 0] (masked mean);
    float: v · w with a learned w ∈ R^d.
    """

    def __init__(self, kind: str, num_items: int, d_model: int, vocab_size: int, max_tokens: int) -> None:
        super().__init__()
        if kind not in FEATURE_KINDS:
            raise ValueError(f"feature kind must be one of {FEATURE_KINDS}, got {kind!r}")
        self.kind = kind
        if kind == "float":
            self.vector = nn.Parameter(torch.zeros(d_model))
            self.register_buffer("table", torch.zeros(num_items + 1))
        else:
            if vocab_size < 2:
                raise ValueError(f"a {kind} feature needs vocab_size >= 2 (padding and unknown), got {vocab_size}")
            self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=0)
            shape = (num_items + 1,) if kind == "token" else (num_items + 1, max_tokens)
            self.register_buffer("table", torch.zeros(shape, dtype=torch.long))

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) -> (B, L, d), embedded once per distinct item of the batch, then gathered."""
        unique, inverse = torch.unique(items, return_inverse=True)  # (U,), (B, L)
        values = self.table[unique]  # (U,) or (U, T)
        if self.kind == "float":
            embedded = values.unsqueeze(-1) * self.vector  # (U, d)
        elif self.kind == "token":
            embedded = self.embedding(values)  # (U, d)
        else:
            # masked mean: padding_idx entries are left out of the mean; a row of padding only gives 0
            embedded = F.embedding_bag(values, self.embedding.weight, mode="mean", padding_idx=0)  # (U, d)
        return embedded[inverse]  # (B, L, d)


class MLP4Rec(SequenceRecommender):
    """MLP4Rec with sequence, channel and feature mixers over F + 1 channels (module docstring for the details).

    ``feature_spec``: one dict per item feature, ``{"name", "kind" (token | token_seq | float),
    "vocab_size", "max_tokens"}`` (the datamodule's ``item_feature_spec``, linked by the CLI); None or []
    builds the model on the item channel alone (F = 0).
    """

    causal: bool = False  # the official mixer reads the whole window; ``causal=True`` masks it (set per instance)

    def __init__(
        self,
        num_items: int,
        max_len: int = 50,
        d_model: int = 128,
        num_layers: int = 4,
        expansion: int = 4,
        dropout: float = 0.5,
        feature_spec: list[dict] | None = None,
        share_mixers: bool = True,
        causal: bool = False,
        mask_padding: bool = True,
        layer_norm_eps: float = 1e-12,
        init_std: float = 0.02,
        padding_side: Literal["left", "right"] = "left",
        mixer_layer_norm_eps: float | None = None,
        zero_padding_row: bool = True,
        checkpoint_layers: bool = False,
        mixer_layout: Literal["positions_first", "reference"] = "positions_first",
        mixer_recompute: bool = False,
    ) -> None:
        super().__init__()
        if num_items < 1:
            raise ValueError(f"num_items must be >= 1, got {num_items}")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.num_items, self.max_len, self.d_model = num_items, max_len, d_model
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        self.num_layers, self.causal, self.mask_padding = num_layers, causal, mask_padding
        self.padding_side, self.zero_padding_row = padding_side, zero_padding_row
        self.checkpoint_layers = checkpoint_layers
        if mixer_layout not in LAYOUTS:
            raise ValueError(f"mixer_layout must be one of {LAYOUTS}, got {mixer_layout!r}")
        self.mixer_layout = mixer_layout
        mixer_eps = layer_norm_eps if mixer_layer_norm_eps is None else mixer_layer_norm_eps
        self.feature_spec = [dict(s) for s in (feature_spec or [])]
        self.feature_names = [str(s["name"]) for s in self.feature_spec]
        if len(set(self.feature_names)) != len(self.feature_names):
            raise ValueError(f"feature names must be unique, got {self.feature_names}")
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.feature_encoders = nn.ModuleList(
            ItemFeatureEncoder(str(s["kind"]), num_items, d_model, int(s.get("vocab_size", 0)), int(s.get("max_tokens", 1)))
            for s in self.feature_spec
        )
        channels = len(self.feature_spec) + 1
        if mixer_recompute and mixer_layout != "positions_first":
            raise ValueError("mixer_recompute needs mixer_layout 'positions_first' (the reference path is plain autograd)")
        make = lambda: MixerLayer(  # noqa: E731
            max_len, d_model, channels, expansion, dropout, mixer_eps, causal, mixer_layout, mixer_recompute
        )
        self.layers = nn.ModuleList([make()] if share_mixers else [make() for _ in range(num_layers)])
        self.share_mixers = share_mixers
        self.final_layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        # False until set_item_features copies the tables (persistent, so a checkpoint restores it)
        self.register_buffer("features_ready", torch.tensor(not self.feature_spec))
        self.reset_parameters(init_std)

    def reset_parameters(self, std: float = 0.02) -> None:
        """N(0, std) embeddings, float-feature vectors and channel-mixer weights, zero biases; padding rows zero."""
        with torch.no_grad():
            nn.init.normal_(self.item_embedding.weight, std=std)
            if self.zero_padding_row:
                self.item_embedding.weight[0].zero_()
            for encoder in self.feature_encoders:
                if encoder.kind == "float":
                    nn.init.normal_(encoder.vector, std=std)
                else:
                    nn.init.normal_(encoder.embedding.weight, std=std)
                    if self.zero_padding_row:
                        encoder.embedding.weight[0].zero_()
            for layer in self.layers:
                for linear in (layer.channel_mixer.fc1, layer.channel_mixer.fc2):
                    nn.init.normal_(linear.weight, std=std)
                    nn.init.zeros_(linear.bias)

    def set_item_features(self, tables: dict[str, Tensor]) -> None:
        """Copy the (N + 1, ...) feature tables (row 0 = padding) into the buffers; names and shapes must match."""
        if sorted(tables) != sorted(self.feature_names):
            raise ValueError(
                f"the model was built for item features {self.feature_names} but the data provides {sorted(tables)}: "
                "leave model feature_spec unset so the CLI links it from the data's features"
            )
        with torch.no_grad():
            for name, encoder in zip(self.feature_names, self.feature_encoders):
                table = torch.as_tensor(tables[name])
                if table.shape != encoder.table.shape:
                    raise ValueError(
                        f"item feature {name!r}: expected a table of shape {tuple(encoder.table.shape)} "
                        f"(num_items + 1 rows{', max_tokens columns' if table.dim() == 2 else ''}), found {tuple(table.shape)}"
                    )
                encoder.table.copy_(table.to(encoder.table.dtype))
            self.features_ready.fill_(True)

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table (the item channel's embedding, as the official code scores)."""
        return self.item_embedding.weight

    def embed(self, items: Tensor, layout: str = "reference") -> Tensor:
        """items (B, L) -> stacked channels X, the item embedding then one per feature: (F + 1, B, L, d) in the
        "reference" layout, (L, F + 1, B, d) "positions_first" (embedded from the transposed ids, no copy of X)."""
        if layout == "positions_first":
            items = items.t()  # (L, B)
        channels = [self.item_embedding(items)] + [encoder(items) for encoder in self.feature_encoders]
        return torch.stack(channels, dim=0 if layout == "reference" else 1)  # (C, B, L, d) or (L, C, B, d)

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded -> hidden (B, L, d) = LayerNorm(channel 0 after the mixer layers)."""
        B, L = items.shape
        if L != self.max_len:
            raise ValueError(
                f"MLP4Rec mixes along a fixed sequence length: expected inputs of length max_len={self.max_len}, "
                f"found {L}; left-pad (or cut) the sequences to max_len"
            )
        if not bool(self.features_ready):
            raise RuntimeError(
                f"item features {self.feature_names} were never set: call set_item_features(tables) with the "
                "datamodule's item_feature_tables() (the task does this in setup)"
            )
        shift = None
        if self.padding_side == "right":  # move each row's n items to positions 0..n-1 (official layout)
            shift = (L - (items != 0).sum(dim=1, keepdim=True)) % L  # (B, 1) leading padding per row
            positions = torch.arange(L, device=items.device).unsqueeze(0)  # (1, L)
            items = items.gather(1, (positions + shift) % L)  # (B, L) right-padded
        keep = (items != 0).unsqueeze(-1).to(self.item_embedding.weight.dtype) if self.mask_padding else None  # (B, L, 1)
        positions_first = self.mixer_layout == "positions_first"
        if keep is not None and positions_first:
            keep = keep.transpose(0, 1).unsqueeze(1)  # (L, 1, B, 1)
        x = self.embed(items, self.mixer_layout)  # (C, B, L, d) or (L, C, B, d)
        if keep is not None:
            x = x * keep
        for i in range(self.num_layers):
            layer = self.layers[0 if self.share_mixers else i]
            if self.checkpoint_layers and self.training and torch.is_grad_enabled():
                # keep only each layer's input; its activations (4× expanded) are recomputed in backward,
                # with the same dropout masks (the RNG state is replayed)
                x = checkpoint(layer, x, keep, use_reentrant=False)
            else:
                x = layer(x, keep)
        hidden = self.final_layer_norm(x[:, 0].transpose(0, 1) if positions_first else x[0])  # (B, L, d)
        if shift is not None:  # back to the left-padded layout: the newest item's hidden (position n-1) at L-1
            back = (positions - shift) % L  # (B, L)
            hidden = hidden.gather(1, back.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        return hidden
