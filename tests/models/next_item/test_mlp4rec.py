"""MLP4Rec: mixer structure, causality option, padding, feature channels and tables, and the shipped configs end to end."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqrec.fit import main
from seqrec.models.layers import keep_mask
from seqrec.models.next_item.mlp4rec import AXIS_DIM, LAYOUTS, MixerMLP, MLP4Rec, _ExpandMLP, axis_product
from seqrec.tasks.next_item import NextItemTask


@pytest.fixture
def one_thread():
    """Training tests run on one thread: on a small shared machine two threads can be many times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

N, L, D = 30, 8, 16
SPEC = [
    {"name": "genres", "kind": "token_seq", "vocab_size": 7, "max_tokens": 3},
    {"name": "brand", "kind": "token", "vocab_size": 5, "max_tokens": 1},
    {"name": "year", "kind": "float", "vocab_size": 0, "max_tokens": 1},
]


def tables(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    genres = torch.randint(0, 7, (N + 1, 3), generator=g)
    genres[:, 0] = torch.randint(1, 7, (N + 1,), generator=g)  # at least one token per item
    out = {
        "genres": genres,
        "brand": torch.randint(1, 5, (N + 1,), generator=g),
        "year": torch.rand(N + 1, generator=g),
    }
    for t in out.values():
        t[0] = 0  # padding row
    return out


def model(spec=SPEC, **kw) -> MLP4Rec:
    torch.manual_seed(0)
    m = MLP4Rec(num_items=N, max_len=L, d_model=D, num_layers=2, dropout=0.0, feature_spec=spec, **kw)
    if spec:
        m.set_item_features(tables())
    return m.eval()


ITEMS = torch.tensor([[0, 0, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 9]])


def test_shapes_and_tied_scores():
    m = model()
    hidden = m(ITEMS)
    assert hidden.shape == (2, L, D)
    assert m.embed(ITEMS).shape == (4, 2, L, D)  # F + 1 channels
    scores = m.score(hidden[:, -1])
    assert scores.shape == (2, N + 1)
    assert torch.allclose(scores[0, 5], hidden[0, -1] @ m.item_embedding.weight[5])


def test_shared_mixers_versus_per_layer():
    shared = MLP4Rec(N, L, D, num_layers=3, feature_spec=SPEC, share_mixers=True)
    per_layer = MLP4Rec(N, L, D, num_layers=3, feature_spec=SPEC, share_mixers=False)
    assert len(shared.layers) == 1 and len(per_layer.layers) == 3
    mixer = sum(p.numel() for p in shared.layers[0].parameters())
    assert sum(p.numel() for p in per_layer.parameters()) - sum(p.numel() for p in shared.parameters()) == 2 * mixer
    # the official expansion: Linear(n -> 4n) along each axis (L, d, F + 1)
    layer = shared.layers[0]
    assert layer.sequence_mixer.fc1.weight.shape == (4 * L, L)
    assert layer.channel_mixer.fc1.weight.shape == (4 * D, D)
    assert layer.feature_mixer.fc1.weight.shape == (4 * 4, 4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mixer_is_prenorm_residual_mlp_along_its_axis(layout):
    torch.manual_seed(0)
    reference = torch.randn(3, 2, 5, 4)  # (C, B, L, d)
    x = reference if layout == "reference" else reference.permute(2, 0, 1, 3).contiguous()  # (L, C, B, d)
    for axis, dim in AXIS_DIM[layout].items():
        size = x.shape[dim]
        mixer = MixerMLP(axis, size, 4, expansion=4, dropout=0.0, eps=1e-12, layout=layout).eval()
        y = F.layer_norm(x, (4,), mixer.layer_norm.weight, mixer.layer_norm.bias, eps=1e-12).movedim(dim, -1)
        y = mixer.fc2(F.gelu(mixer.fc1(y))).movedim(-1, dim)
        assert torch.allclose(mixer(x), x + y, atol=1e-5), axis


@pytest.mark.parametrize("recompute_hidden", [False, True])
@pytest.mark.parametrize("axis", ["sequence", "channel", "feature"])
def test_fused_mixer_mlp_gradients_equal_autograd(axis, recompute_hidden):
    """The hand-written backward (activations recomputed from z, h or only the mask) against gradcheck and against
    autograd of the plain formula W₂ (GELU(W₁ z + b₁) ⊙ m · s) + b₂ along the axis, float64."""
    torch.manual_seed(0)
    L, C, B, d, e = 5, 3, 2, 4, 4
    n = {"sequence": L, "channel": d, "feature": C}[axis]
    z = torch.randn(L, C, B, d, dtype=torch.float64, requires_grad=True)
    expanded = list(z.shape)
    expanded[AXIS_DIM["positions_first"][axis]] = e * n
    weights = (torch.randn(e * n, n, dtype=torch.float64), torch.randn(e * n, dtype=torch.float64),
               torch.randn(n, e * n, dtype=torch.float64), torch.randn(n, dtype=torch.float64))
    w1, b1, w2, b2 = (w.requires_grad_() for w in weights)
    keep = torch.rand(expanded) > 0.3
    fused_fn = lambda *t: _ExpandMLP.apply(*t, keep, 1 / 0.7, axis, recompute_hidden)  # noqa: E731
    assert torch.autograd.gradcheck(fused_fn, (z, w1, b1, w2, b2))
    fused = fused_fn(z, w1, b1, w2, b2)
    plain = axis_product(axis, F.gelu(axis_product(axis, z, w1, b1)) * keep / 0.7, w2, b2)
    torch.testing.assert_close(fused, plain)
    g = torch.randn_like(plain)
    inputs = (z, w1, b1, w2, b2)
    torch.testing.assert_close(torch.autograd.grad(fused, inputs, g), torch.autograd.grad(plain, inputs, g))


@pytest.mark.parametrize("mask_padding, padding_side, causal, recompute",
                         [(False, "right", False, False), (True, "left", True, False), (False, "right", False, True)])
def test_positions_first_layout_equals_the_reference_path(mask_padding, padding_side, causal, recompute):
    """Same weights, no dropout, float64: the fused positions-first path gives the reference path's output and
    gradients (float32 differs only by summation order)."""
    kw = dict(spec=SPEC, mask_padding=mask_padding, padding_side=padding_side, causal=causal)
    fused, reference = model(mixer_recompute=recompute, **kw).double(), model(mixer_layout="reference", **kw).double()
    reference.load_state_dict(fused.state_dict())
    results = []
    probe = torch.randn(*ITEMS.shape, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for m in (fused, reference):
        m.train()  # dropout 0: the same function, through the training path
        hidden = m(ITEMS)
        (hidden * probe).sum().backward()  # a loss with real gradients everywhere
        results.append((hidden, [p.grad for p in m.parameters() if p.grad is not None]))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-12, atol=1e-12)
    for a, b in zip(results[0][1], results[1][1], strict=True):
        # gradients are sums over every position and channel, taken in other orders by the two paths (batched
        # products against one product): float64 rounding reaches ~1e-12 on entries that are themselves near 0
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("axis", ["sequence", "channel", "feature"])
def test_fused_mixer_dropout_is_inverted_dropout_after_gelu_and_after_fc2(axis):
    """Training mode, p = 0.3: the fused mixer equals x + drop(fc2(drop(GELU(fc1(LN(x)))))) with the masks that
    ``keep_mask`` draws in that order from the same seed; about 30% of the expanded units are dropped."""
    torch.manual_seed(0)
    x = torch.randn(6, 3, 4, 8)  # (L, C, B, d)
    size = x.shape[AXIS_DIM["positions_first"][axis]]
    mixer = MixerMLP(axis, size, 8, expansion=4, dropout=0.3, eps=1e-5, layout="positions_first").train()
    torch.manual_seed(5)
    fused = mixer(x)
    torch.manual_seed(5)
    h = axis_product(axis, mixer.layer_norm(x), mixer.fc1.weight, mixer.fc1.bias)
    keep1, scale1 = keep_mask(h.shape, h.device, 0.3)
    out = axis_product(axis, F.gelu(h) * keep1 * scale1, mixer.fc2.weight, mixer.fc2.bias)
    keep2, scale2 = keep_mask(out.shape, out.device, 0.3)
    torch.testing.assert_close(fused, x + out * keep2 * scale2)
    assert abs(keep1.float().mean().item() - 0.7) < 0.05 and scale1 == pytest.approx(1 / 0.7, rel=1e-4)


def test_non_causal_by_default_and_causal_option():
    changed = ITEMS.clone()
    changed[:, -1] = 20  # only the newest item differs
    for causal in (False, True):
        m = model(causal=causal)
        before, after = m(ITEMS), m(changed)
        assert not torch.allclose(before[:, -1], after[:, -1])
        earlier_same = torch.allclose(before[:, :-1], after[:, :-1], atol=1e-5)
        assert earlier_same == causal  # official (non-causal): earlier positions see the later item
    # with mask_padding=False (official) causality still holds for the causal variant
    m = model(causal=True, mask_padding=False)
    assert torch.allclose(m(ITEMS)[:, :-1], m(changed)[:, :-1], atol=1e-5)


def test_padding_content_never_reaches_real_positions():
    m = model()
    before = m(ITEMS)[0, 2:].clone()
    with torch.no_grad():  # garbage in every padding row: item embedding and feature tables
        m.item_embedding.weight[0].normal_()
        for encoder in m.feature_encoders:
            encoder.table[0] = 3
    assert torch.allclose(m(ITEMS)[0, 2:], before, atol=1e-5)


def test_features_enter_the_output_and_token_seq_is_a_masked_mean():
    m = model()
    base = m(ITEMS)[:, -1].clone()
    for name in ("genres", "brand", "year"):
        changed = tables()
        changed[name][8] = changed[name][8] + (1 if name != "genres" else 0)
        if name == "genres":
            changed[name][8] = torch.tensor([6, 6, 0])
        m.set_item_features(changed)
        assert not torch.allclose(m(ITEMS)[0, -1], base[0]), name  # item 8 is user 0's newest
        m.set_item_features(tables())
    genres = m.feature_encoders[0]
    rows = genres.table[ITEMS]  # (B, L, T)
    mask = (rows != 0).unsqueeze(-1).float()
    expected = (genres.embedding(rows) * mask).sum(2) / mask.sum(2).clamp(min=1)
    assert torch.allclose(genres(ITEMS), expected, atol=1e-6)
    assert torch.all(genres(torch.zeros(1, L, dtype=torch.long)) == 0)  # padding row: no tokens -> 0
    year = m.feature_encoders[2]
    assert torch.allclose(year(ITEMS), year.table[ITEMS].unsqueeze(-1) * year.vector)


def test_without_features_it_is_the_item_channel_alone():
    m = model(spec=None)
    assert len(m.feature_encoders) == 0 and m.embed(ITEMS).shape[0] == 1
    assert m(ITEMS).shape == (2, L, D)
    m.set_item_features({})  # nothing to set; still fine


def test_feature_tables_are_checked_set_once_and_saved():
    m = MLP4Rec(N, L, D, feature_spec=SPEC)
    with pytest.raises(RuntimeError, match="never set"):
        m(ITEMS)
    with pytest.raises(ValueError, match="provides \\['genres'\\]"):
        m.set_item_features({"genres": tables()["genres"]})
    bad = tables()
    bad["genres"] = bad["genres"][:, :2]
    with pytest.raises(ValueError, match="'genres'.*shape \\(31, 3\\).*found \\(31, 2\\)"):
        m.set_item_features(bad)
    m.set_item_features(tables())
    restored = MLP4Rec(N, L, D, feature_spec=SPEC)
    restored.load_state_dict(m.state_dict())  # tables and the ready flag travel with the checkpoint
    assert torch.equal(restored.feature_encoders[0].table, tables()["genres"])
    assert torch.allclose(restored.eval()(ITEMS), m.eval()(ITEMS))
    with pytest.raises(ValueError, match="max_len=8"):
        m(ITEMS[:, 1:])


def test_task_refuses_labels_before_the_last_position_for_a_non_causal_model():
    task = NextItemTask(model(spec=None))
    windows = {"items": ITEMS, "labels": torch.roll(ITEMS, -1, dims=1)}
    with pytest.raises(ValueError, match="not causal.*train_mode: prefix"):
        task.training_step(windows, 0)
    prefix = {"items": ITEMS, "labels": torch.zeros_like(ITEMS)}
    prefix["labels"][:, -1] = 11
    assert torch.isfinite(task.training_step(prefix, 0))
    causal = NextItemTask(model(spec=None, causal=True))
    assert torch.isfinite(causal.training_step(windows, 0))


def test_learns_a_sequence_pattern(one_thread):
    """Prefix training on 'next = newest + 1' must beat chance (1/30) by far within 60 steps."""
    torch.manual_seed(0)
    m = MLP4Rec(N, L, 16, num_layers=1, dropout=0.0)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(60):
        start = torch.randint(1, N + 1, (32, 1))
        seq = (start + torch.arange(L + 1)) % N + 1  # (64, L + 1)
        hidden = m(seq[:, :-1])[:, -1]
        loss = F.cross_entropy(m.score(hidden)[:, 1:], seq[:, -1] - 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    seq = (torch.arange(1, N + 1).unsqueeze(1) + torch.arange(L + 1)) % N + 1
    accuracy = (m.score(m(seq[:, :-1])[:, -1])[:, 1:].argmax(-1) + 1 == seq[:, -1]).float().mean()
    assert accuracy > 0.9


# --- the shipped configs, end to end on the MovieLens fixture ---------------------------------------


@pytest.fixture
def fit_args(tiny_fit) -> Callable[..., list[str]]:
    """``fit_args(config, run_dir, *extra)``: ``tiny_fit`` (tests/conftest.py) of ``config`` for two epochs, with
    the config's batch size and validation cadence; 10 candidates keep the @10 metrics meaningful."""

    def args(config: str, run_dir: Path, *extra: str) -> list[str]:
        return tiny_fit(run_dir, "--data.init_args.eval_negatives", "9", *extra, config=config, batch_size=None,
                        max_epochs=2, val_every=None)

    return args


def test_mlp4rec_config_links_features_and_runs(fit_args, tmp_path):
    results = main(fit_args("mlp4rec_ml100k.yaml", tmp_path, "--model.net.num_layers", "1"))
    assert set(results) >= {"test/hr@10", "test/ndcg@10", "test/mrr@10"}
    config = next(tmp_path.rglob("config.yaml")).read_text()
    assert "SourceItemFeatures" in config and "negative_sampler: popularity" in config
    ckpt = torch.load(next(tmp_path.rglob("last.ckpt")), weights_only=False)
    names = {k for k in ckpt["state_dict"] if k.endswith(".table")}
    assert names == {f"net.feature_encoders.{i}.table" for i in range(3)}  # genres, title, year
    assert bool(ckpt["state_dict"]["net.features_ready"])


@pytest.mark.parametrize("config", ["sasrec_ml100k_pop100.yaml", "gru4rec_ml100k_pop100.yaml"])
def test_baseline_configs_run_under_the_same_protocol(config, fit_args, tmp_path):
    results = main(fit_args(config, tmp_path))
    assert set(results) >= {"test/hr@10", "test/ndcg@10", "test/mrr@10"}
    written = json.loads(next(tmp_path.rglob("test_metrics.json")).read_text())
    assert written == pytest.approx(results)


def test_beauty_config_validates(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--config", "mlp4rec_beauty.yaml", "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "seqrec.data.sources.item_features.S3RecAttributes" in printed and "seqrec.models.next_item.mlp4rec.MLP4Rec" in printed


@pytest.mark.slow
def test_real_beauty_config_runs_a_few_steps(shared_data, tmp_path):
    results = main([
        "--config", "mlp4rec_beauty.yaml",
        "--data.init_args.source.init_args.path", str(shared_data / "s3rec" / "Beauty.txt.gz"),
        "--data.init_args.features.init_args.path", str(shared_data / "s3rec" / "Beauty_item2attributes.json.gz"),
        "--model.net.d_model", "8", "--model.net.num_layers", "1",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
        "--trainer.limit_test_batches", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path), "--trainer.default_root_dir", str(tmp_path), "--threads", "1",
    ])
    assert set(results) >= {"test/hr@10", "test/ndcg@10", "test/mrr@10"}


def test_right_padding_reads_the_newest_item_at_position_len_minus_one():
    """padding_side="right" equals mixing the right-padded rows and reading position n - 1 (the official code)."""
    torch.manual_seed(0)
    right = MLP4Rec(num_items=30, max_len=6, d_model=8, num_layers=2, padding_side="right", mask_padding=False).eval()
    left = MLP4Rec(num_items=30, max_len=6, d_model=8, num_layers=2, padding_side="left", mask_padding=False).eval()
    left.load_state_dict(right.state_dict())
    items = torch.tensor([[0, 0, 0, 4, 5, 6], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 9]])
    lengths = (items != 0).sum(dim=1)
    right_padded = torch.stack([torch.cat([row[row != 0], row[row == 0]]) for row in items])
    with torch.no_grad():
        expected = left(right_padded)[torch.arange(3), lengths - 1]
        torch.testing.assert_close(right(items)[:, -1], expected)
        torch.testing.assert_close(right.last_hidden(items), expected)


def test_official_initialisation_options():
    torch.manual_seed(0)
    official = MLP4Rec(num_items=30, max_len=6, d_model=8, zero_padding_row=False, mixer_layer_norm_eps=1e-5)
    assert official.item_embedding.weight[0].abs().sum() > 0
    assert official.layers[0].sequence_mixer.layer_norm.eps == 1e-5 and official.final_layer_norm.eps == 1e-12
    assert MLP4Rec(num_items=30, max_len=6, d_model=8).item_embedding.weight[0].abs().sum() == 0
    with pytest.raises(ValueError, match="padding_side"):
        MLP4Rec(num_items=30, max_len=6, d_model=8, padding_side="middle")


def test_layer_checkpointing_gives_the_same_loss_and_gradients():
    torch.manual_seed(0)
    plain = MLP4Rec(num_items=30, max_len=6, d_model=8, num_layers=2, dropout=0.3)
    saved = MLP4Rec(num_items=30, max_len=6, d_model=8, num_layers=2, dropout=0.3, checkpoint_layers=True)
    saved.load_state_dict(plain.state_dict())
    items = torch.tensor([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])
    grads = []
    for model in (plain, saved):
        torch.manual_seed(7)  # the same dropout masks in both
        model.train()
        model(items).square().sum().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)
