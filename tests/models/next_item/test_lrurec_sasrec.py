"""LRURecSASRec: SASRec as LRURec's authors' code computes it (github Yueeeeeeee/RecSys-Extraction-Attack,
``model/sasrec.py``), checked against that code imported from the checkout named by
``$SEQREC_RECSYS_EXTRACTION_ATTACK_REPO`` (never copied), and on its own where the checkout is absent."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from seqrec.models.layers import BERTLayerNorm
from seqrec.models.next_item.lrurec_sasrec import LRURecSASRec
from tests.models.next_item.bert4rec_reference import reference_dir, reference_module
from tests.models.next_item.reference import compare, ml1m_test_queries

N, L = 300, 50

# reference parameter names -> ours (regex, replacement), applied in order
RENAMES = [
    (r"^embedding\.token\.weight$", "item_embedding.weight"),
    (r"^embedding\.position\.pe\.weight$", "position_embedding.weight"),
    (r"^model\.transformer_blocks\.(\d+)\.layer_norm\.", r"blocks.\1.query_layer_norm."),
    (r"^model\.transformer_blocks\.(\d+)\.attention\.layer_norm\.", r"blocks.\1.attention_layer_norm."),
    (r"^model\.transformer_blocks\.(\d+)\.attention\.linear_layers\.0\.", r"blocks.\1.attention.q_proj."),
    (r"^model\.transformer_blocks\.(\d+)\.attention\.linear_layers\.1\.", r"blocks.\1.attention.k_proj."),
    (r"^model\.transformer_blocks\.(\d+)\.attention\.linear_layers\.2\.", r"blocks.\1.attention.v_proj."),
    (r"^model\.transformer_blocks\.(\d+)\.feed_forward\.conv1\.", r"blocks.\1.ffn.w_1."),
    (r"^model\.transformer_blocks\.(\d+)\.feed_forward\.conv2\.", r"blocks.\1.ffn.w_2."),
    (r"^model\.transformer_blocks\.(\d+)\.feed_forward\.layer_norm\.", r"blocks.\1.ffn_layer_norm."),
]


def our_name(name: str) -> str:
    for pattern, replacement in RENAMES:
        name = re.sub(pattern, replacement, name)
    return name


def reference_sasrec(num_items: int, max_len: int, seed: int = 0) -> nn.Module:
    """The reference SASRec at LRURec's settings (d 64, 2 blocks, 2 heads), every weight redrawn wider than its
    ±0.04 init and the LayerNorms perturbed, so that a mis-mapped or mis-computed part cannot pass."""
    args = SimpleNamespace(num_items=num_items, bert_hidden_units=64, bert_max_len=max_len, bert_dropout=0.2,
                           bert_attn_dropout=0.2, bert_num_heads=2, bert_head_size=None, bert_num_blocks=2)
    torch.manual_seed(seed)
    model = reference_module(reference_dir(), "sasrec").SASRec(args)
    with torch.no_grad():
        for name, param in model.model.named_parameters():
            param.add_(0.1 * torch.randn_like(param)) if "layer_norm" in name else param.normal_(0.0, 0.15)
    return model.eval()


def ours_from(reference: nn.Module, num_items: int, max_len: int, padding: str) -> LRURecSASRec:
    """Ours holding the reference's weights (every parameter mapped, none left over; the 1×1 convolutions as
    linear maps)."""
    model = LRURecSASRec(num_items, max_len=max_len, d_model=64, num_blocks=2, num_heads=2, padding=padding)
    state = {our_name(k): v.squeeze(-1) if ".feed_forward.conv" in k and k.endswith("weight") else v
             for k, v in reference.state_dict().items()}
    model.load_state_dict(state, strict=True)
    return model.eval()


def windows(num_items: int, max_len: int, lengths: list[int], seed: int = 1) -> torch.Tensor:
    """Left-padded rows (len(lengths), max_len) of random items with these numbers of real items."""
    generator = torch.Generator().manual_seed(seed)
    items = torch.randint(1, num_items + 1, (len(lengths), max_len), generator=generator)
    for row, n in enumerate(lengths):
        items[row, : max_len - n] = 0
    return items


def test_equal_to_the_reference_at_every_position_with_official_padding_and_at_real_ones_with_clean():
    reference = reference_sasrec(N, L)
    items = windows(N, L, [L, L, 1, 2, 17, 33, 49, 5])
    real = items != 0
    with torch.no_grad():
        theirs = reference(items)  # (B, L, N + 1)
        official = ours_from(reference, N, L, "official")
        ours = official.score(official(items))
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-4)  # padded positions included
        clean = ours_from(reference, N, L, "clean")
        torch.testing.assert_close(clean.score(clean(items))[real], theirs[real], rtol=1e-5, atol=1e-4)
        assert not torch.allclose(clean.score(clean(items))[~real], theirs[~real], atol=1e-2)  # padded: its own state
        torch.testing.assert_close(clean.score(clean.last_hidden(items)), theirs[:, -1], rtol=1e-5, atol=1e-4)
    assert theirs.abs().max() > 10  # the comparison is at a scale where a wrong formula shows


def test_parity_with_the_reference_on_ml1m(shared_data):
    reference_dir()  # skip first when the checkout is absent
    queries = ml1m_test_queries(shared_data)
    reference = reference_sasrec(queries.num_items, 200)
    ours = ours_from(reference, queries.num_items, 200, "clean")
    with torch.no_grad():
        logits = torch.cat([reference(queries.items[s:s + 256])[:, -1] for s in range(0, len(queries.target), 256)])
    parity = compare(ours, logits, queries)
    print(f"LRURecSASRec vs RecSys-Extraction-Attack SASRec on {parity.queries} ML-1M test queries: {parity.line()}")
    assert parity.max_abs_logit_diff <= 1e-5 * max(parity.logit_scale, 1.0)
    assert parity.equal_ranks >= 0.999 * parity.queries


# --- without the reference ---------------------------------------------------------------------------


def model(padding: str = "clean", dropout: float = 0.0) -> LRURecSASRec:
    torch.manual_seed(0)
    return LRURecSASRec(40, max_len=12, d_model=16, num_blocks=2, num_heads=2, dropout=dropout,
                        attention_dropout=dropout, padding=padding).eval()


@pytest.mark.parametrize("padding", ["clean", "official"])
def test_real_positions_never_read_padding_or_later_items(padding):
    net = model(padding)
    items = windows(40, 12, [12, 7, 3])
    with torch.no_grad():
        base = net(items)
        later = items.clone()
        later[:, -1] = (later[:, -1] % 40) + 1  # change the newest item
        changed = net(later)
        trimmed = net(items[1:, 2:])  # rows 1-2 (5 and 9 padding columns) with two padding columns fewer
    real = items != 0
    torch.testing.assert_close(changed[:, :-1][real[:, :-1]], base[:, :-1][real[:, :-1]])  # causal
    torch.testing.assert_close(trimmed[real[1:, 2:]], base[1:, 2:][real[1:, 2:]], rtol=1e-5, atol=1e-5)


def test_a_padded_positions_state_leaks_the_window_only_with_official_padding():
    """The label of a padded input position (the first item of a short window) is predicted from that position:
    "clean" gives it a state that no item changes; "official" (the reference) averages every key, later real items
    included."""
    items = windows(40, 12, [5])  # positions 0..6 padding
    other = items.clone()
    other[0, 7:] = (other[0, 7:] % 40) + 1  # every real item changed
    for padding, leaks in (("clean", False), ("official", True)):
        net = model(padding)
        with torch.no_grad():
            first, second = net(items)[0, :7], net(other)[0, :7]
        assert torch.allclose(first, second, atol=1e-6) is not leaks, padding


def test_init_is_the_references():
    net = LRURecSASRec(500, max_len=50)
    for name, param in net.blocks.named_parameters():
        if "layer_norm" in name:
            assert torch.equal(param, torch.ones_like(param) if name.endswith("weight") else torch.zeros_like(param))
        else:
            assert param.abs().max() <= 0.04 and param.std() > 0.01, name  # biases drawn too
    assert torch.equal(net.item_embedding.weight[0], torch.zeros(64))
    assert 0.9 < net.item_embedding.weight[1:].std() < 1.1 and 0.9 < net.position_embedding.weight.std() < 1.1
    assert all(isinstance(m, BERTLayerNorm) for n, m in net.named_modules() if n.endswith("layer_norm"))
    assert isinstance(net.blocks[0].attention.out_proj, nn.Identity)  # heads concatenated, no W_o
    assert net.blocks[0].ffn.w_1.out_features == 4 * 64


def test_truncated_normal_tables_are_drawn_like_the_encoder_with_the_padding_row_zero():
    net = LRURecSASRec(500, max_len=50, embedding_init="truncated_normal")
    for table in (net.item_embedding.weight, net.position_embedding.weight):
        assert table.abs().max() <= 0.04 and 0.01 < table[1:].std() < 0.03
    assert torch.equal(net.item_embedding.weight[0], torch.zeros(64))
    with pytest.raises(ValueError, match="embedding_init must be 'normal' or 'truncated_normal'"):
        LRURecSASRec(10, embedding_init="xavier")


def test_official_padding_trains_and_its_padded_rows_stay_finite():
    net = model("official", dropout=0.2).train()
    items = windows(40, 12, [12, 3, 1])
    out = net(items)
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


def test_bad_padding_is_refused():
    with pytest.raises(ValueError, match="padding must be 'clean' or 'official'"):
        LRURecSASRec(10, padding="left")


# --- configs -----------------------------------------------------------------------------------------


def test_the_model_part_composes_and_the_flag_form_swaps_the_net_of_a_shipped_sasrec_config(tmp_path):
    from seqrec.build import parse
    from seqrec.config_files import CONFIG_DIR

    experiment = tmp_path / "lrurec_sasrec_beauty.yaml"
    experiment.write_text(f"compose: [{CONFIG_DIR}/protocol/lrurec_beauty.yaml, {CONFIG_DIR}/model/lrurec_sasrec.yaml]\n")
    composed = parse(["--config", str(experiment)]).model.init_args.net
    swapped = parse(["--config", "sasrec_beauty", "--model.net", "seqrec.models.next_item.lrurec_sasrec.LRURecSASRec",
                     "--model.net.attention_dropout", "0.2"]).model.init_args.net
    for net in (composed, swapped):
        assert net.class_path == "seqrec.models.next_item.lrurec_sasrec.LRURecSASRec"
        args = net.init_args
        assert (args.d_model, args.num_blocks, args.num_heads, args.dropout, args.attention_dropout, args.max_len,
                args.padding) == (64, 2, 2, 0.2, 0.2, 50, "clean")
    assert composed.init_args.embedding_init == "truncated_normal"  # the part's choice (model/lrurec_sasrec.yaml)
    assert swapped.init_args.embedding_init == "normal"  # the class default: the reference's
