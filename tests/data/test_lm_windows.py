"""LM token streams: windows whose last 4 words are targets and never inputs, the vocabulary, encoding."""

import numpy as np
import pytest

from seqrec.data.lm_windows import BLANK, EOS, UNK, LMWindows, build_vocabulary, encode


@pytest.mark.parametrize("label_context", [False, True])
def test_last_four_words_are_targets_never_inputs(label_context):
    tokens = np.arange(10, 10 + 3 * 8 + 5)  # distinct ids: 3 windows of W = 8 and a partial one (dropped)
    windows = LMWindows(tokens, max_len=7, num_targets=4, label_context=label_context)
    assert len(windows) == 3
    for j in range(3):
        window = tokens[j * 8 : (j + 1) * 8]
        example = windows[j]
        items, labels = example["items"].numpy(), example["labels"].numpy()
        assert items.tolist() == [*window[:4], BLANK, BLANK, BLANK]
        assert labels[-4:].tolist() == window[-4:].tolist()  # position 3 predicts the next word, blanks the rest
        assert not set(window[-4:]) & set(items)  # a target never reaches the input
        context = labels[:-4].tolist()
        assert context == (window[1:4].tolist() if label_context else [0, 0, 0])


def test_vocabulary_from_training_text_with_unknown_token():
    train = ["a b a c", "a b d", "b e"]
    vocabulary = build_vocabulary(train, min_count=2)
    assert vocabulary == ["<pad>", "<unk>", "</s>", "<blank>", "a", "b"]  # b (3) and a (3) tie: alphabetical
    assert build_vocabulary(train, min_count=1, max_vocab=3)[4:] == ["a", "b", "c"]
    ids = encode(["a z b", "c"], vocabulary)
    assert ids.tolist() == [4, UNK, 5, EOS, UNK, EOS]
    assert encode(["a"], vocabulary, add_eos=False).tolist() == [4]
