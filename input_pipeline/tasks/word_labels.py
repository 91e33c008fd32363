"""Word labels onto word pieces and back: the alignment every token-classification task needs.

A word such as "Blackburn" becomes several pieces (`black`, `##burn`). Only the first
piece carries the word's label and counts in the loss (BERT paper, section 5.3); the others
are ignored, or, with `label_all_subwords`, labelled too, with B-X turned into I-X since
the entity began at the first piece. A prediction for a word is read at its first piece.

Sentences longer than the model's `max_seq_len` are split into windows at word
boundaries, each `[CLS] pieces [SEP]` on its own, so no word loses its label or its
prediction; the windows' predictions are joined again in order. (Windows do not overlap: a
word near a cut sees less context. With MiniLM's uncased vocabulary and `max_seq_len` 128,
1 of CoNLL-2003's 14,041 training sentences, 3 of 3,250 dev and 1 of 3,453 test sentences
need two windows.) A single word with more pieces than a window holds keeps only its first
pieces.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

IGNORED = -100  # the label of a piece that is not scored (as Hugging Face's convention)


@dataclasses.dataclass(frozen=True)
class Window:
    """One model input: some consecutive words of one sentence."""
    sentence: int  # index of the sentence it comes from
    first_word: int  # index, in that sentence, of its first word
    input_ids: np.ndarray  # (T,) int32: [CLS] pieces [SEP]
    labels: np.ndarray  # (T,) int32 label id per piece, IGNORED where not scored
    word_starts: np.ndarray  # (W,) int32 position of each word's first piece


def word_pieces(tokenizer, sentences: Sequence[Sequence[str]]) -> list[list[list[int]]]:
    """Piece ids of every word of every sentence: [sentence][word] -> ids.

    A tokenizer run by `tokenizers` (WordPiece, a tokenizer.json) encodes each sentence as
    pre-split words and its `word_ids` say which word each piece came from. Each word after
    the first is given the space that stands before it in running text, so a byte-level BPE
    (ModernBERT's) gives the pieces the sentence's text gives (`Ġword`, not `word`); a
    WordPiece drops the space (its pieces are those of
    `BertTokenizerFast(words, is_split_into_words=True)`). SentencePiece encodes word by
    word. A word that yields no piece at all (a lone control character) becomes [UNK], so
    every word still gets a prediction.
    """
    backend = getattr(tokenizer, "backend", None)
    if backend is None:
        flat = [word for words in sentences for word in words]
        encoded, result, start = tokenizer.encode_batch(flat), [], 0
        for words in sentences:
            result.append([ids or [tokenizer.unk_id] for ids in encoded[start:start + len(words)]])
            start += len(words)
        return result
    in_running_text = [[word if index == 0 else " " + word for index, word in enumerate(words)]
                       for words in sentences]
    encodings = backend.encode_batch(in_running_text, is_pretokenized=True,
                                     add_special_tokens=False)
    result = []
    for words, encoding in zip(sentences, encodings):
        pieces = [[] for _ in words]
        for piece_id, word_id in zip(encoding.ids, encoding.word_ids):
            pieces[word_id].append(piece_id)
        result.append([ids or [tokenizer.unk_id] for ids in pieces])
    return result


def _inside(label: str) -> str:
    return "I-" + label[2:] if label.startswith("B-") else label


def _window_spans(lengths: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """[start, end) word ranges whose pieces fit `budget`; a longer word gets its own window."""
    spans, start, used = [], 0, 0
    for index, length in enumerate(lengths):
        if used and used + length > budget:
            spans.append((start, index))
            start, used = index, 0
        used += length
    spans.append((start, len(lengths)))
    return spans


def align(tokenizer, sentences: Sequence[Sequence[str]], tags: Sequence[Sequence[str]] | None,
          label_ids: dict[str, int], max_seq_len: int, label_all_subwords: bool = False
          ) -> list[Window]:
    """Model inputs for `sentences` (lists of words) with `tags` per word (None: unlabelled).

    Returns the windows in sentence order; a sentence that fits is one window.
    """
    budget = max_seq_len - 2  # room for [CLS] and [SEP]
    if budget < 1:
        raise ValueError(f"max_seq_len {max_seq_len} leaves no room for a word")
    windows = []
    for index, pieces in enumerate(word_pieces(tokenizer, sentences)):
        for start, end in _window_spans([len(ids) for ids in pieces], budget):
            input_ids, labels, word_starts = [tokenizer.cls_id], [IGNORED], []
            for word in range(start, end):
                ids = pieces[word][:budget]
                word_starts.append(len(input_ids))
                input_ids += ids
                if tags is None:
                    labels += [IGNORED] * len(ids)
                    continue
                tag = tags[index][word]
                rest = label_ids[_inside(tag)] if label_all_subwords else IGNORED
                labels += [label_ids[tag]] + [rest] * (len(ids) - 1)
            input_ids.append(tokenizer.sep_id)
            labels.append(IGNORED)
            windows.append(Window(index, start, np.array(input_ids, np.int32),
                                  np.array(labels, np.int32), np.array(word_starts, np.int32)))
    return windows


def pad_windows(windows: Sequence[Window], seq_len: int, batch_size: int | None = None
                ) -> dict[str, np.ndarray]:
    """A batch of windows padded to (batch_size, seq_len) int32 arrays.

    `input_ids`, `segment_ids`, `input_mask`, `labels` (0 where not scored) and
    `label_weights` (1 for a scored piece). Filler rows past `len(windows)` hold one [PAD]
    token with its mask set, so attention stays defined, and weigh nothing.
    """
    rows = batch_size or len(windows)
    batch = {name: np.zeros((rows, seq_len), np.int32)
             for name in ("input_ids", "segment_ids", "input_mask", "labels", "label_weights")}
    for row, window in enumerate(windows):
        length = len(window.input_ids)
        if length > seq_len:
            raise ValueError(f"window of {length} pieces does not fit seq_len {seq_len}")
        batch["input_ids"][row, :length] = window.input_ids
        batch["input_mask"][row, :length] = 1
        scored = window.labels != IGNORED
        batch["labels"][row, :length] = np.where(scored, window.labels, 0)
        batch["label_weights"][row, :length] = scored
    batch["input_mask"][len(windows):, 0] = 1
    return batch


def word_predictions(windows: Sequence[Window], piece_predictions: Sequence[np.ndarray],
                     num_sentences: int) -> list[list[int]]:
    """Per sentence, the label id of each word: the prediction at its first piece.

    `piece_predictions[i]` is window i's (T,) predicted label ids (T at least its length).
    """
    words: list[list[int]] = [[] for _ in range(num_sentences)]
    for window, predictions in zip(windows, piece_predictions, strict=True):
        if len(words[window.sentence]) != window.first_word:
            raise ValueError("windows must come in sentence order")
        words[window.sentence] += [int(label) for label in predictions[window.word_starts]]
    return words
