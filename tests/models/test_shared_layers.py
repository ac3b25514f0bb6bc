"""The shared attention and feed-forward (seqrec.models.layers) compute exactly what SASRec, the CTR transformer
and LRURec computed with their own copies.

The references below are the implementations as they were before the layers were shared, kept here only as
the reference. Old and new models are built with the same seed: their weights must be equal under the key
mapping of the renamed parameters (``sasrec_key``, ``ctr_key``: old checkpoints need it), and their outputs,
their training outputs under the same dropout seed, and their gradients bitwise equal (``torch.equal``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import seqrec.models.ctr.transformer as transformer_module
from seqrec.compress import METHODS, build
from seqrec.models.ctr.transformer import CTRTransformer, RecencyBias
from seqrec.models.layers import Dropout
from seqrec.models.next_item.lru import PositionwiseFeedForward
from seqrec.models.next_item.sasrec import SASRec

N, L = 40, 12

# --- the references: the code before the layers were shared ---------------------------------------------


class OldCausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(self, queries: Tensor, keys: Tensor, allowed: Tensor) -> Tensor:
        B, L_, d = queries.shape
        h = self.num_heads
        q = self.q_proj(queries).view(B, L_, h, d // h).transpose(1, 2)
        k = self.k_proj(keys).view(B, L_, h, d // h).transpose(1, 2)
        v = self.v_proj(keys).view(B, L_, h, d // h).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=self.dropout if self.training else 0.0)
        return self.out_proj(out.transpose(1, 2).reshape(B, L_, d))


class OldPointWiseFeedForward(nn.Module):
    def __init__(self, d_model: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden)
        self.w2 = nn.Linear(hidden, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.dropout(self.w2(F.relu(self.dropout(self.w1(x)))))


class OldSASRecBlock(nn.Module):
    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float) -> None:
        super().__init__()
        self.attn_layer_norm = nn.LayerNorm(d_model, eps=1e-8)
        self.attention = OldCausalSelfAttention(d_model, num_heads, dropout)
        self.ffn_layer_norm = nn.LayerNorm(d_model, eps=1e-8)
        self.ffn = OldPointWiseFeedForward(d_model, ffn_dim, dropout)

    def forward(self, x: Tensor, allowed: Tensor, keep: Tensor) -> Tensor:
        q = self.attn_layer_norm(x)
        x = q + self.attention(q, x, allowed)
        x = self.ffn(self.ffn_layer_norm(x))
        return x * keep


class OldSASRec(nn.Module):
    def __init__(self, num_items: int, max_len: int, d_model: int, num_blocks: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.max_len, self.d_model = max_len, d_model
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.embedding_dropout = Dropout(dropout)
        self.blocks = nn.ModuleList(OldSASRecBlock(d_model, num_heads, d_model, dropout) for _ in range(num_blocks))
        self.final_layer_norm = nn.LayerNorm(d_model, eps=1e-8)
        for name, param in self.named_parameters():
            if "layer_norm" in name:
                continue
            if param.dim() > 1:
                nn.init.xavier_normal_(param)
            else:
                nn.init.zeros_(param)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()

    def forward(self, items: Tensor) -> Tensor:
        B, L_ = items.shape
        real = items != 0
        positions = torch.arange(self.max_len - L_, self.max_len, device=items.device)
        x = self.item_embedding(items) * math.sqrt(self.d_model) + self.position_embedding(positions)
        keep = real.unsqueeze(-1).to(x.dtype)
        x = self.embedding_dropout(x) * keep
        causal = torch.ones(L_, L_, dtype=torch.bool, device=items.device).tril()
        eye = torch.eye(L_, dtype=torch.bool, device=items.device)
        allowed = ((causal & real.unsqueeze(1)) | eye).unsqueeze(1)
        for block in self.blocks:
            x = block(x, allowed, keep)
        return self.final_layer_norm(x)


class OldCTRBlock(nn.Module):
    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, recency_buckets: int = 0,
                 max_distance: int = 200) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.recency = RecencyBias(num_heads, recency_buckets, max_distance) if recency_buckets > 0 else None
        self.attn_layer_norm = nn.LayerNorm(d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.ffn_layer_norm = nn.LayerNorm(d_model)
        self.ffn_in = nn.Linear(d_model, ffn_dim)
        self.ffn_out = nn.Linear(ffn_dim, d_model)
        self.dropout = Dropout(dropout)

    def _heads(self, x: Tensor) -> Tensor:
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).transpose(-2, -3)

    def qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        z = self.attn_layer_norm(x)
        return self._heads(self.q_proj(z)), self._heads(self.k_proj(z)), self._heads(self.v_proj(z))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
        logits = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
        if bias is not None:
            logits = logits + bias
        weights = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        return self.dropout(weights) @ v, weights

    def attend_target(self, q: Tensor, k_self: Tensor, v_self: Tensor, keys: Tensor, values: Tensor, key_mask: Tensor,
                      log_size: Tensor | None = None) -> tuple[Tensor, Tensor]:
        scale = 1.0 / math.sqrt(self.head_dim)
        logits = (q @ keys.transpose(-1, -2)) * scale
        if log_size is not None:
            logits = logits + log_size
        logits = logits.masked_fill(~key_mask, float("-inf"))
        self_logit = (q * k_self).sum(-1, keepdim=True) * scale
        if self.recency is not None:
            self_logit = self_logit + self.recency.bias.weight[0].view(1, -1, 1, 1)
        weights = torch.softmax(torch.cat([logits, self_logit], dim=-1), dim=-1)
        dropped = self.dropout(weights)
        out = dropped[..., :-1] @ values + dropped[..., -1:] * v_self
        return out, weights[..., :-1]

    def finish(self, x: Tensor, heads: Tensor) -> Tensor:
        merged = heads.transpose(-2, -3).reshape(x.shape)
        x = x + self.dropout(self.out_proj(merged))
        return x + self.dropout(self.ffn_out(self.dropout(F.gelu(self.ffn_in(self.ffn_layer_norm(x))))))

    def token_macs(self) -> int:
        d, f = self.q_proj.in_features, self.ffn_in.out_features
        return 4 * d * d + 2 * d * f


class OldLRUFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.activation = nn.GELU()
        self.dropout = Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        inner = self.dropout(self.activation(self.w_1(x)))
        return self.layer_norm(x + self.dropout(self.w_2(inner)))


# --- key mappings of the renamed parameters (old checkpoints need them) -----------------------------------


def sasrec_key(old: str) -> str:
    """SASRec: ``ffn.w1``/``ffn.w2`` became ``ffn.w_1``/``ffn.w_2`` (attention keys unchanged)."""
    return re.sub(r"\.ffn\.w([12])\.", r".ffn.w_\1.", old)


def ctr_key(old: str) -> str:
    """CTR transformer: a block's ``{q,k,v,out}_proj`` moved into ``attention.``; ``ffn_in``/``ffn_out`` became
    ``ffn.w_1``/``ffn.w_2`` (``blocks.0.q_proj.weight`` -> ``blocks.0.attention.q_proj.weight``)."""
    old = re.sub(r"^(blocks\.\d+\.)?(q_proj|k_proj|v_proj|out_proj)\.", r"\1attention.\2.", old)
    return old.replace("ffn_in.", "ffn.w_1.").replace("ffn_out.", "ffn.w_2.")


def histories(batch: int = 6, seed: int = 1) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    items = torch.randint(1, N + 1, (batch, L), generator=g)
    lengths = torch.tensor([L, 7, 1, 3, L - 1, 5][:batch])
    return torch.where(torch.arange(L)[None, :] >= L - lengths[:, None], items, torch.zeros_like(items))


def assert_equal(a: Tensor, b: Tensor) -> None:
    assert a.shape == b.shape and torch.equal(a, b), (a - b).abs().max()


def train_equal(new: nn.Module, old: nn.Module, fn: Callable[[nn.Module], Tensor], key: Callable[[str], str]) -> None:
    """Training mode under the same dropout seed: equal outputs, and equal gradients (old name -> new name by ``key``)."""
    outputs = []
    for model in (new, old):
        model.train()
        model.zero_grad()
        torch.manual_seed(7)
        out = fn(model)
        out.pow(2).sum().backward()
        outputs.append(out)
    assert_equal(*outputs)
    new_grads = {name: p.grad for name, p in new.named_parameters()}
    for name, p in old.named_parameters():
        assert_equal(new_grads[key(name)], p.grad)


# --- the tests ---------------------------------------------------------------------------------------------


def test_sasrec_same_seed_same_weights_same_outputs(monkeypatch):
    # the reference paths (SEQREC_KERNELS=0): with the compiled dropout, CPU training draws attention dropout's
    # mask there instead of in SDPA (tests/models/test_layers.py checks that path against SDPA's formula)
    monkeypatch.setenv("SEQREC_KERNELS", "0")
    torch.manual_seed(0)
    old = OldSASRec(N, max_len=L, d_model=16, num_blocks=2, num_heads=2, dropout=0.3)
    torch.manual_seed(0)
    new = SASRec(N, max_len=L, d_model=16, num_blocks=2, num_heads=2, dropout=0.3)
    old_state = old.state_dict()
    assert {sasrec_key(k) for k in old_state} == set(new.state_dict())
    for key, value in old_state.items():  # the same seed gives the same initial weights
        assert_equal(new.state_dict()[sasrec_key(key)], value)
    items = histories()
    with torch.no_grad():
        assert_equal(new.eval()(items), old.eval()(items))
    train_equal(new, old, lambda m: m(items), sasrec_key)


def ctr_model(dropout: float = 0.2) -> CTRTransformer:
    """A CTR transformer built with seed 0, with a trained-looking recency bias (it starts at zero)."""
    torch.manual_seed(0)
    model = CTRTransformer(N, max_len=L, d_model=16, num_layers=2, num_heads=2, dropout=dropout)
    torch.manual_seed(1)
    with torch.no_grad():
        for block in model.blocks:
            nn.init.normal_(block.recency.bias.weight)
    return model


def ctr_pair(monkeypatch: pytest.MonkeyPatch) -> tuple[CTRTransformer, CTRTransformer]:
    """(new model, old model) built with the same seed; only the blocks changed, so the old model is the
    transformer built with the old block class."""
    new = ctr_model()
    with monkeypatch.context() as patch:
        patch.setattr(transformer_module, "CTRBlock", OldCTRBlock)
        old = ctr_model()
    assert isinstance(old.blocks[0], OldCTRBlock)
    old_state, new_state = old.state_dict(), new.state_dict()
    assert {ctr_key(k) for k in old_state} == set(new_state)
    for key, value in old_state.items():  # the same seed gives the same initial weights
        assert_equal(new_state[ctr_key(key)], value)
    return new, old


def test_ctr_transformer_blocks_compute_what_the_old_blocks_computed(monkeypatch):
    new, old = ctr_pair(monkeypatch)
    history = histories()
    targets = torch.randint(1, N + 1, (6, 3), generator=torch.Generator().manual_seed(2))
    window_targets = torch.randint(1, N + 1, (6, L, 2), generator=torch.Generator().manual_seed(3))
    new.eval(), old.eval()
    with torch.no_grad():
        assert_equal(new(history, targets), old(history, targets))  # prefill + score_state
        assert_equal(new.forward_windows(history, window_targets), old.forward_windows(history, window_targets))
        assert_equal(new.forward_full(history, targets[:, 0]), old.forward_full(history, targets[:, 0]))
    train_equal(new, old, lambda m: m.forward_windows(history, window_targets), ctr_key)
    train_equal(new, old, lambda m: m(history, targets), ctr_key)


@pytest.mark.parametrize("method", METHODS)
def test_compression_wrappers_see_the_same_layers(method, monkeypatch):
    """Wrappers read the blocks' qkv / attention weights / target attention: the same numbers as before."""
    new, old = ctr_pair(monkeypatch)
    history = histories()
    targets = torch.randint(1, N + 1, (6, 3), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        a, b = build(method, new.eval(), 0.5), build(method, old.eval(), 0.5)
        assert_equal(a(history, targets), b(history, targets))
        assert a.costs() == b.costs()


def test_lru_feed_forward_is_the_shared_one_with_a_post_norm_residual():
    torch.manual_seed(0)
    old = OldLRUFeedForward(8, 32, 0.3)
    torch.manual_seed(0)
    new = PositionwiseFeedForward(8, 32, 0.3)
    assert list(new.state_dict()) == list(old.state_dict())  # names unchanged: LRURec checkpoints load
    for key, value in old.state_dict().items():
        assert_equal(new.state_dict()[key], value)
    x = torch.randn(4, 5, 8)
    with torch.no_grad():
        assert_equal(new.eval()(x), old.eval()(x))
    train_equal(new, old, lambda m: m(x), lambda name: name)
