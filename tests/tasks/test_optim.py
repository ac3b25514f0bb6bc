import torch
from torch import nn

from seqrec.tasks.optim import build_optimizer


def test_no_decay_names_get_zero_weight_decay():
    model = nn.Sequential()
    model.add_module("proj", nn.Linear(3, 2))
    model.add_module("layer_norm", nn.LayerNorm(2))
    opt = build_optimizer(model.named_parameters(), "adamw", 1e-3, 0.01, (0.9, 0.98), 1e-9, None)
    assert isinstance(opt, torch.optim.AdamW)
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.01 and [p.shape for p in decayed["params"]] == [torch.Size([2, 3])]
    assert plain["weight_decay"] == 0.0 and len(plain["params"]) == 3  # proj.bias, layer_norm weight and bias
    assert opt.defaults["eps"] == 1e-9 and opt.defaults["betas"] == (0.9, 0.98)


def test_nothing_trainable_gives_no_optimizer():
    assert build_optimizer(iter([]), "adam", 1e-3, 0.0, (0.9, 0.999), 1e-8, None) is None
