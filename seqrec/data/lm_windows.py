"""Language-model token streams: a vocabulary from training text, word ids, and windows with held-out targets.

Vocabulary (choices, all options): built from the training sentences only; a word is kept when it occurs
at least ``min_count`` times (3, the benchmark's convention), optionally capped at the ``max_vocab`` most
frequent; every other word (in any split) becomes ``<unk>``. Ids: 0 padding, 1 ``<unk>``, 2 ``</s>``
(appended to each sentence when ``add_eos``), 3 ``<blank>`` (the placeholder input at held-out
positions, never a target), then words by decreasing training count (ties alphabetical).

Windows: each split's sentences are concatenated in order into one token stream and cut into
non-overlapping windows of W = max_len + 1 = 128 tokens (a trailing partial window is dropped). With
K = ``num_targets`` = 4 held-out words per window w_0..w_{W−1}::

    items  = w_0 … w_{W−K−1}, <blank> × (K−1)              (length max_len = W − 1)
    labels at positions W−K−1 … W−2 = w_{W−K} … w_{W−1}    (position W−K−1 predicts the next word;
                                                            each blank position predicts one step further)

so the K target words are never inputs. ``label_context`` (the datamodule's ``train_labels="all"``) also
labels every context position with its next word (standard LM training on the first W−K words);
evaluation windows carry only the K targets.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
from torch.utils.data import Dataset

PAD, UNK, EOS, BLANK = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<unk>", "</s>", "<blank>")


def build_vocabulary(sentences: list[str], min_count: int = 3, max_vocab: int | None = None) -> list[str]:
    """Special tokens, then training words with count >= min_count by decreasing count (ties alphabetical)."""
    counts = Counter(word for sentence in sentences for word in sentence.split())
    words = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIAL_TOKENS), key=lambda w: (-counts[w], w))
    if max_vocab is not None:
        words = words[:max_vocab]
    return [*SPECIAL_TOKENS, *words]


def encode(sentences: list[str], vocabulary: list[str], add_eos: bool = True) -> np.ndarray:
    """Token stream: word ids of all sentences in order (unknown words -> <unk>), ``</s>`` after each."""
    index = {word: i for i, word in enumerate(vocabulary)}
    out: list[int] = []
    for sentence in sentences:
        out.extend(index.get(word, UNK) for word in sentence.split())
        if add_eos:
            out.append(EOS)
    return np.asarray(out, dtype=np.int32)


class LMWindows(Dataset):
    """Windows of W = max_len + 1 tokens over a stream; the last ``num_targets`` are targets, never inputs.

    Item: ``{"items": (max_len,), "labels": (max_len,)}`` (module docstring for the layout); label 0 = no loss.
    """

    def __init__(self, tokens: np.ndarray, max_len: int, num_targets: int, label_context: bool) -> None:
        if not 1 <= num_targets < max_len:
            raise ValueError(f"num_targets must lie in 1..max_len-1={max_len - 1}, got {num_targets}")
        self.tokens, self.max_len, self.num_targets = tokens, max_len, num_targets
        self.window = max_len + 1
        self.label_context = label_context

    def __len__(self) -> int:
        return len(self.tokens) // self.window

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        window = self.tokens[index * self.window : (index + 1) * self.window].astype(np.int64)  # (W,)
        W, K = self.window, self.num_targets
        items = np.full(self.max_len, BLANK, dtype=np.int64)
        items[: W - K] = window[: W - K]  # context w_0 .. w_{W-K-1}, then K-1 blanks
        labels = np.zeros(self.max_len, dtype=np.int64)
        if self.label_context:
            labels[: W - K - 1] = window[1 : W - K]  # next word of every context position but the last
        labels[W - K - 1 :] = window[W - K :]  # the K targets
        return {"items": torch.from_numpy(items), "labels": torch.from_numpy(labels)}
