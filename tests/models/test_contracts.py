"""The typed contracts of seqrec.models.base: which shipped model satisfies which Protocol, with signatures a
caller can rely on; the CTR base; the compressor contract defined once; models import torch only."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest
import torch
from torch import nn

import seqrec.models
import seqrec.models.base as base
from seqrec.compress import METHODS, CompressedCTR, build
from seqrec.models.ctr.lru import CTRLRU
from seqrec.models.ctr.transformer import CTRTransformer
from seqrec.models.next_item.bert4rec import BERT4Rec
from seqrec.models.next_item.evornn import EvoRNN
from seqrec.models.next_item.fmlprec import FMLPRec
from seqrec.models.next_item.gru4rec import GRU4Rec
from seqrec.models.next_item.lru import LRURec
from seqrec.models.next_item.lrurec_sasrec import LRURecSASRec
from seqrec.models.next_item.mlp4rec import MLP4Rec
from seqrec.models.next_item.narm import NARM
from seqrec.models.next_item.popularity import Popularity
from seqrec.models.next_item.sasrec import SASRec

PROTOCOLS = (base.ItemFeatureConsumer, base.CountingRecommender, base.RecurrentRecommender, base.ClozeRecommender,
             base.DeclaresMACs,
             base.DeclaresStateBytes, base.DeclaresKeptLengths, base.DeclaresRequestMACs)


def models() -> dict[str, nn.Module]:
    """One small instance of every shipped model and of a compression wrapper."""
    transformer = CTRTransformer(num_items=20, max_len=8, d_model=8, num_layers=1, num_heads=2)
    return {
        "SASRec": SASRec(num_items=20, max_len=8, d_model=8),
        "LRURecSASRec": LRURecSASRec(num_items=20, max_len=8, d_model=8),
        "BERT4Rec": BERT4Rec(num_items=20, max_len=8, d_model=8),
        "LRURec": LRURec(num_items=20, d_model=8),
        "GRU4Rec": GRU4Rec(num_items=20, d_model=8, hidden_size=8),
        "EvoRNN": EvoRNN(num_items=20, max_len=8, d_model=8),
        "MLP4Rec": MLP4Rec(num_items=20, max_len=8, d_model=8, num_layers=1),
        "FMLPRec": FMLPRec(num_items=20, max_len=8, d_model=8, num_layers=1),
        "NARM": NARM(num_items=20, d_model=8),
        "Popularity": Popularity(num_items=20),
        "CTRTransformer": transformer,
        "CTRLRU": CTRLRU(num_items=20, d_model=8, num_layers=1),
        "SnapKV": build("snapkv", transformer, 0.5),
    }


# which model answers which question (anything not listed must answer no)
EXPECTED = {
    base.ItemFeatureConsumer: {"MLP4Rec"},
    base.CountingRecommender: {"Popularity"},
    base.RecurrentRecommender: {"LRURec", "GRU4Rec"},
    base.ClozeRecommender: {"BERT4Rec"},
    base.DeclaresMACs: {"BERT4Rec", "EvoRNN", "FMLPRec", "NARM", "CTRTransformer", "CTRLRU"},
    base.DeclaresStateBytes: {"LRURec", "CTRTransformer", "CTRLRU", "SnapKV"},
    base.DeclaresKeptLengths: {"CTRTransformer", "CTRLRU", "SnapKV"},
    base.DeclaresRequestMACs: {"CTRTransformer", "CTRLRU", "SnapKV"},
}


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_each_capability_is_declared_by_exactly_the_models_that_have_it(protocol):
    found = {name for name, model in models().items() if isinstance(model, protocol)}
    assert found == EXPECTED[protocol]


def protocol_methods(protocol: type) -> list[str]:
    return [name for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("_")]


def accepts(implementation: inspect.Signature, declared: inspect.Signature) -> bool:
    """True when every call the declared signature allows is allowed by the implementation: the declared
    parameters exist by name (required ones may be optional), every extra parameter has a default."""
    own = implementation.parameters
    for name, param in declared.parameters.items():
        if name not in own:
            return False
        if param.default is not inspect.Parameter.empty and own[name].default is inspect.Parameter.empty:
            return False
    return all(p.default is not inspect.Parameter.empty for n, p in own.items() if n not in declared.parameters)


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_implementations_accept_the_declared_signatures(protocol):
    for name, model in models().items():
        if not isinstance(model, protocol):
            continue
        for method in protocol_methods(protocol):
            declared = inspect.signature(getattr(protocol, method))
            declared = declared.replace(parameters=list(declared.parameters.values())[1:])  # drop self
            assert accepts(inspect.signature(getattr(model, method)), declared), f"{name}.{method}"


def test_causal_flags():
    """``causal`` False means a position may see later items: BERT4Rec (bidirectional attention), MLP4Rec's official
    (unmasked) mixer and FMLP-Rec's filter (a circular convolution over the whole window)."""
    found = models()
    for name in ("SASRec", "LRURecSASRec", "LRURec", "GRU4Rec", "EvoRNN", "NARM", "Popularity"):
        assert found[name].causal is True, name
    assert found["FMLPRec"].causal is False and found["BERT4Rec"].causal is False
    assert found["MLP4Rec"].causal is False and MLP4Rec.causal is False
    assert MLP4Rec(num_items=20, max_len=8, d_model=8, num_layers=1, causal=True).causal is True


def test_every_next_item_model_in_the_package_is_a_sequence_recommender():
    classes = set()
    for info in pkgutil.walk_packages(seqrec.models.__path__, prefix="seqrec.models."):
        module = importlib.import_module(info.name)
        if info.name.startswith("seqrec.models.next_item."):
            classes |= {cls for cls in vars(module).values() if inspect.isclass(cls) and cls.__module__ == info.name
                        and issubclass(cls, base.SequenceRecommender)}
    assert {c.__name__ for c in classes} == {"SASRec", "BERT4Rec", "LRURec", "GRU4Rec", "EvoRNN", "MLP4Rec",
                                             "FMLPRec", "NARM", "Popularity", "LRURecSASRec"}


def test_ctr_models_and_wrappers_are_ctr_backbones():
    found = models()
    for name in ("CTRTransformer", "CTRLRU", "SnapKV"):
        assert isinstance(found[name], base.CTRBackbone), name
    transformer = found["CTRTransformer"]
    for method in METHODS:
        wrapper = build(method, transformer, 0.5)
        assert isinstance(wrapper, base.CTRBackbone) and isinstance(wrapper, base.Compressor), method
        assert wrapper.num_items == transformer.num_items and wrapper.max_len == transformer.max_len
    assert found["CTRLRU"].max_len is None  # a recurrent state takes any history length
    with pytest.raises(TypeError, match="abstract"):
        base.CTRBackbone()
    history = torch.tensor([[0, 3, 4, 5], [1, 2, 3, 4]])
    targets = torch.tensor([[6, 7, 8], [9, 10, 11]])
    for name in ("CTRTransformer", "CTRLRU", "SnapKV"):
        model = found[name].eval()
        with torch.no_grad():
            logits = model(history, targets)
            assert logits.shape == (2, 3), name
            assert torch.equal(logits, model.score_state(model.prefill(history), targets)), name
            assert model.forward_windows(history, targets[:, None, :].expand(2, 4, 3)).shape == (2, 4, 3), name
        assert model.state_bytes(3, 4) == int(3 * model.state_bytes_per_user(4)), name


def test_the_compressor_contract_is_defined_once():
    import seqrec.compress.base as compress_base
    import seqrec.models.ctr.state as state
    import seqrec.models.ctr.transformer as transformer

    for name in ("TokenState", "LayerCache", "KVState", "LayerTrace", "Compressor"):
        defined = getattr(state, name)
        assert defined.__module__ == "seqrec.models.ctr.state"
        assert getattr(base, name) is defined and getattr(transformer, name) is defined
        assert getattr(compress_base, name, defined) is defined
    assert issubclass(CompressedCTR, base.CTRBackbone)


def test_models_import_torch_only():
    """A model can be lifted into serving code alone: no Lightning, no data code, no task."""
    modules = [info.name for info in pkgutil.walk_packages(seqrec.models.__path__, prefix="seqrec.models.")]
    code = (f"import sys\nfor name in {modules!r}:\n    __import__(name)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning', 'torchmetrics')"
            " or m.startswith(('seqrec.data', 'seqrec.datamodules', 'seqrec.tasks', 'seqrec.callbacks')))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
