import torch

from seqrec.tasks.padding import drop_padding


def test_drop_padding_keeps_real_rows_of_every_per_example_tensor():
    batch = {
        "items": torch.tensor([[1, 2], [3, 4], [1, 2]]),
        "target": torch.tensor([5, 6, 5]),
        "valid": torch.tensor([True, True, False]),
    }
    out = drop_padding(batch)
    assert set(out) == {"items", "target"}
    assert out["items"].tolist() == [[1, 2], [3, 4]] and out["target"].tolist() == [5, 6]
    single = {"items": torch.tensor([[1, 2]])}
    assert drop_padding(single) is single
