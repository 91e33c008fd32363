"""Real `finetune qa` windows of a made-up SQuAD v2.0 file, for the v2.0 step-parity test.

Every question is "paris ?" (two tokens) and every context word one token of
interop_helpers' vocabulary, so at SEQ_LEN 16 a window is [CLS] paris ? [SEP], 11 context
tokens, [SEP]; with contexts of 11 + 4k words and DOC_STRIDE 4 every window is full (no
padding), so transformers' loss (which keeps padding in the softmax) sees the same problem.
A third of the questions are unanswerable (no paris); the answer elsewhere is "paris" and
the word after it.
"""

import json

import numpy as np
from interop_helpers import WORDS

SEQ_LEN, DOC_STRIDE, PREFIX, CONTEXT_TOKENS = 16, 4, 4, 11  # [CLS] paris ? [SEP]; 16-2-3
PLAIN = [word for word in WORDS if not word.startswith("##") and word not in ("paris", "?")]


def made_up_v2(directory, count: int = 12) -> tuple[str, list]:
    """(path, per question: the context word index of "paris", or None if unanswerable)."""
    rng = np.random.default_rng(5)
    paragraphs, answers = [], []
    for index in range(count):
        words = list(rng.choice(PLAIN, size=CONTEXT_TOKENS + DOC_STRIDE * (index % 4)))
        qa = {"id": f"q{index}", "question": "paris ?", "answers": [],
              "is_impossible": index % 3 == 0}
        answer = None
        if not qa["is_impossible"]:
            answer = int(rng.integers(0, len(words) - 1))
            words[answer] = "paris"
            start = len(" ".join(words[:answer])) + (answer > 0)
            qa["answers"] = [{"text": f"paris {words[answer + 1]}", "answer_start": start}]
        paragraphs.append({"context": " ".join(words), "qas": [qa]})
        answers.append(answer)
    path = directory / "squad_v2.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [
        {"title": "made up", "paragraphs": paragraphs}]}), encoding="utf-8")
    return str(path), answers


def expected_targets(window_starts: list[int], answer: int | None) -> list[tuple[int, int]]:
    """(start, end) of each window as the original run_squad.py sets them: the answer's
    tokens where the window holds both, else [CLS] (0, 0)."""
    targets = []
    for start in window_starts:
        inside = answer is not None and start <= answer and answer + 1 < start + CONTEXT_TOKENS
        targets.append((PREFIX + answer - start, PREFIX + answer + 1 - start) if inside
                       else (0, 0))
    return targets


def v2_examples(tokenizer, directory):
    from bert_jax.tasks.arguments import QuestionAnsweringSettings
    from bert_jax.tasks.question_answering import QuestionAnsweringTask

    task = QuestionAnsweringTask(QuestionAnsweringSettings(doc_stride=DOC_STRIDE,
                                                           max_query_len=4, version_2=True))
    path, answers = made_up_v2(directory)
    return task.read_examples(path, tokenizer, SEQ_LEN), answers


def squad_v2_batches(tokenizer, directory, batch_size: int, steps: int) -> list[dict]:
    """`steps` batches of `batch_size` windows in a seeded order, the last two rows of each
    filler (weight 0, only [CLS] unmasked, as batching.BucketedBatches fills a batch)."""
    examples, _ = v2_examples(tokenizer, directory)
    features = examples.features
    real = batch_size - 2
    order = np.random.default_rng(0).permutation(len(features["input_ids"]))
    assert len(order) >= real * steps, len(order)
    batches = []
    for step in range(steps):
        rows = order[step * real:(step + 1) * real]
        batch = {name: np.concatenate([value[rows], np.zeros((2, *value.shape[1:]),
                                                             value.dtype)])
                 for name, value in features.items()}
        batch["input_mask"][-2:, 0] = 1
        batches.append(batch)
    return batches
