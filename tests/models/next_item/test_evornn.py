"""EvoRNN: a single segment is a GRU, state is carried across segments, op counts equal the formula."""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from seqrec.models.next_item.evornn import EvoRNN, gru_step_macs, power_law_schedule


def copy_cell_into_gru(cell: torch.nn.GRUCell) -> torch.nn.GRU:
    gru = torch.nn.GRU(cell.input_size, cell.hidden_size, batch_first=True)
    with torch.no_grad():
        gru.weight_ih_l0.copy_(cell.weight_ih)
        gru.weight_hh_l0.copy_(cell.weight_hh)
        gru.bias_ih_l0.copy_(cell.bias_ih)
        gru.bias_hh_l0.copy_(cell.bias_hh)
    return gru


def size_at(model: EvoRNN, distance: int) -> int:
    """Hidden size used for the event at ``distance`` from the end (1 = newest): in a window of ``distance``
    events that event is the oldest, so it runs in the first segment of ``segment_spans(distance)``."""
    return model.hidden_sizes[model.segment_spans(distance)[0][0]]


def test_single_segment_is_exactly_a_gru_and_padding_changes_nothing():
    torch.manual_seed(0)
    model = EvoRNN(num_items=30, max_len=12, d_model=8, hidden_sizes=[8], dropout=0.0).eval()
    gru = copy_cell_into_gru(model.cells[0])
    items = torch.randint(1, 31, (3, 7))
    expected, _ = gru(model.item_embedding(items))  # (B, 7, h)
    torch.testing.assert_close(model(items), expected)
    padded = torch.cat([torch.zeros(3, 5, dtype=torch.long), items], dim=1)  # left padding to max_len
    torch.testing.assert_close(model(padded)[:, 5:], expected)
    torch.testing.assert_close(model.last_hidden(padded), expected[:, -1])


def test_state_is_carried_across_segments_by_the_projection():
    torch.manual_seed(0)
    # two segments of the same size, the same cell weights, identity projection: one GRU over everything
    model = EvoRNN(num_items=20, max_len=10, d_model=6, hidden_sizes=[6, 6], segment_lengths=[4], dropout=0.0).eval()
    model.cells[1].load_state_dict(model.cells[0].state_dict())
    gru = copy_cell_into_gru(model.cells[0])
    items = torch.randint(1, 21, (2, 10))
    torch.testing.assert_close(model(items), gru(model.item_embedding(items))[0])
    # a different projection changes every output after the boundary, none before it
    with torch.no_grad():
        model.projections[0].weight.mul_(0.5)
    changed = ~torch.isclose(model(items), gru(model.item_embedding(items))[0], atol=1e-6, rtol=1e-5)
    assert not changed[:, :6].any() and changed[:, 6:].all(dim=-1).all()


def test_growing_schedule_runs_each_segment_with_its_own_size():
    torch.manual_seed(0)
    model = EvoRNN(num_items=50, max_len=20, d_model=8, hidden_sizes=[4, 8, 16], segment_lengths=[6, 3], dropout=0.0)
    assert model.segment_spans(20) == [(0, 0, 11), (1, 11, 17), (2, 17, 20)]
    assert model.segment_spans(5) == [(1, 0, 2), (2, 2, 5)]  # a short window starts in a newer segment
    assert [size_at(model, t) for t in (1, 3, 4, 9, 10, 100)] == [16, 16, 8, 8, 4, 4]
    items = torch.randint(1, 51, (4, 20))
    items[0, :15] = 0  # a short user whose history starts in the middle segment
    out = model(items)
    assert out.shape == (4, 20, 8)
    out[:, -1].sum().backward()
    for k, cell in enumerate(model.cells):
        assert cell.weight_hh.grad is not None and cell.weight_hh.grad.abs().sum() > 0, k
    # the short row equals the same events in a window of their own length (padding never counts)
    torch.testing.assert_close(model.eval()(items[:1, 15:])[:, -1], model(items[:1])[:, -1])


def test_op_count_formula_by_hand():
    model = EvoRNN(num_items=99, max_len=50, d_model=32, hidden_sizes=[8, 16, 48], segment_lengths=[20, 10])
    # τ 1..10: h=48, τ 11..30: h=16, τ 31..50: h=8; step cost 3h(d + h)
    recurrent = 10 * 3 * 48 * (32 + 48) + 20 * 3 * 16 * (32 + 16) + 20 * 3 * 8 * (32 + 8)
    assert recurrent == 115_200 + 46_080 + 19_200
    projections = 8 * 16 + 16 * 48
    readout_all = 10 * 48 * 32 + 20 * 16 * 32 + 20 * 8 * 32
    assert model.op_counts(50) == {
        "recurrent": recurrent,
        "projections": projections,
        "readout_last": 48 * 32,
        "readout_all": readout_all,
        "serving": recurrent + projections + 48 * 32,
        "forward": recurrent + projections + readout_all,
        "scoring": 100 * 32,
    }
    assert model.macs_per_sequence(50) == recurrent + projections + readout_all
    # 12 events only reach the middle segment: no 8→16 projection
    assert model.op_counts(12)["projections"] == 16 * 48
    assert model.serving_macs(12) == 10 * 3 * 48 * 80 + 2 * 3 * 16 * 48 + 16 * 48 + 48 * 32
    assert gru_step_macs(32, 48) == 3 * 48 * 80
    fixed = EvoRNN(num_items=99, max_len=50, d_model=32, hidden_sizes=[32])  # width d: identity readouts
    counts = fixed.op_counts()
    assert counts["serving"] == counts["forward"] == counts["recurrent"] == 50 * 3 * 32 * 64


@pytest.mark.parametrize(
    "hidden_sizes, segment_lengths, d_model, length",
    [([16], [], 16, 9), ([8, 16, 48], [20, 10], 32, 50), ([8, 16, 48], [20, 10], 32, 12), ([12, 24], [3], 24, 7)],
)
def test_op_count_equals_torch_flop_counter(hidden_sizes, segment_lengths, d_model, length):
    model = EvoRNN(num_items=40, max_len=50, d_model=d_model, hidden_sizes=hidden_sizes,
                   segment_lengths=segment_lengths).eval()
    items = torch.randint(1, 41, (1, length))
    with FlopCounterMode(display=False) as counter:
        model.last_hidden(items)
    assert counter.get_total_flops() == 2 * model.serving_macs(length)  # one MAC = 2 FLOPs
    with FlopCounterMode(display=False) as counter:
        model(items)
    assert counter.get_total_flops() == 2 * model.macs_per_sequence(length)
    # scoring the catalogue is (N + 1)·d more
    with FlopCounterMode(display=False) as counter:
        model.score(model.last_hidden(items))
    assert counter.get_total_flops() == 2 * (model.serving_macs(length) + model.scoring_macs())


def test_power_law_schedule_follows_the_correlation_decay():
    # d = 0.25: exponent 1/(1 - 2d) = 2, so level j starts at τ = 2^(2j) = 1, 4, 16, (64 > max_len)
    sizes, lengths = power_law_schedule(max_len=50, max_hidden=64, lrd_d=0.25, input_size=64)
    # level costs 24576, 12288, 6144 -> h = 64, 39.6 -> 40, 23.4 -> 24 (rounded up to multiples of 8)
    assert sizes == [24, 40, 64] and lengths == [12, 3]
    model = EvoRNN(num_items=10, max_len=50, d_model=64, schedule="power_law", hidden_sizes=[64], lrd_d=0.25)
    assert model.hidden_sizes == sizes and model.segment_lengths == lengths
    top = gru_step_macs(64, 64)
    for tau in range(1, 51):  # the realised cost never falls below the power law c0·τ^(2d-1)
        assert gru_step_macs(64, size_at(model, tau)) >= top * tau ** (2 * 0.25 - 1) - 1e-9
    # stronger dependence decays more slowly: fewer MACs saved
    slow = power_law_schedule(50, 64, 0.4, 64)
    fast = power_law_schedule(50, 64, 0.1, 64)
    macs = {
        name: sum(gru_step_macs(64, h) * n for h, n in zip(s, [50 - sum(seg), *seg]))
        for name, (s, seg) in {"slow": slow, "fast": fast, "mid": (sizes, lengths)}.items()
    }
    assert macs["fast"] < macs["mid"] < macs["slow"] < 50 * top
    assert power_law_schedule(50, 64, 0.6, 64) == ([64], [])  # no decay: a fixed GRU
    # τ_0 delays the decay: the newest τ_0 events keep the full size
    sizes, lengths = power_law_schedule(50, 64, 0.25, 64, scale=5)
    assert sizes[-1] == 64 and lengths[-1] == math.ceil(5 * 2**2) - 1


def test_schedule_errors_say_what_to_do():
    with pytest.raises(ValueError, match="lengths of the 2 newer segment"):
        EvoRNN(num_items=5, max_len=10, hidden_sizes=[4, 8, 16], segment_lengths=[3])
    with pytest.raises(ValueError, match="oldest segment would never run"):
        EvoRNN(num_items=5, max_len=10, hidden_sizes=[4, 8], segment_lengths=[10])
    with pytest.raises(ValueError, match="seqrec.tools.lrd"):
        EvoRNN(num_items=5, max_len=10, schedule="power_law")
    with pytest.raises(ValueError, match="exceeds max_len"):
        EvoRNN(num_items=5, max_len=4)(torch.ones(1, 5, dtype=torch.long))


@pytest.fixture
def one_thread():
    """Small step-by-step recurrences run 10x slower with several threads on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_learns_a_pattern_that_needs_the_oldest_segment(one_thread):
    """The next item is the item seen 6 steps earlier (+1): the evidence sits in the oldest, smallest segment."""
    torch.manual_seed(0)
    num_items, L = 20, 12
    model = EvoRNN(num_items=num_items, max_len=L, d_model=16, hidden_sizes=[16, 32], segment_lengths=[5], dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)

    def batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        items = torch.randint(1, num_items + 1, (size, L))
        target = items[:, L - 6] % num_items + 1  # position L-6 is τ = 6 from the end: the h=16 segment
        return items, target

    for _ in range(150):
        items, target = batch(64)
        loss = torch.nn.functional.cross_entropy(model.score(model.last_hidden(items))[:, 1:], target - 1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    items, target = batch(500)
    accuracy = (model.score(model.eval().last_hidden(items))[:, 1:].argmax(-1) + 1 == target).float().mean()
    assert accuracy > 0.9  # chance is 1/20: the state crossed the 16 → 32 projection
