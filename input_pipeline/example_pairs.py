"""Made-up sentence pairs for `finetune sentence-embedding` (STS scores and NLI labels) and
`finetune regress`/`classify` on pairs, written by `bert-jax examples DIR`.

The pairs are example_files.py's film-review sentences scored as the made-up GLUE download
scores them (glue_examples.py): STS's 0..5 score by how close the two ratings are, NLI's
label entailment when the verdicts agree and rate alike, neutral when they agree only,
contradiction otherwise. JSONL with the keys `finetune sentence-embedding` reads
(sentence1/sentence2/score, premise/hypothesis/label).
"""

import json
import random

from bert_jax.storage import files
from input_pipeline.example_files import sentiment_rows
from input_pipeline.glue_examples import pair_label, similarity_score

FILES = {
    "pairs_train.jsonl": "200 made-up sentence pairs, keys sentence1, sentence2, score (0..5, "
                         "how alike their ratings are) (finetune sentence-embedding, regress)",
    "pairs_dev.jsonl": "50 more, with verdicts training never shows (--eval, evaluate sts)",
    "nli_train.jsonl": "about 400 made-up premise/hypothesis pairs, each premise with an "
                       "entailment, a neutral and a contradiction hypothesis (finetune "
                       "classify, sentence-embedding --loss mnrl)",
    "nli_dev.jsonl": "about 100 more, with verdicts training never shows (--eval)",
}


def _lines(records) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def nli_records(rows, rng: random.Random) -> list[dict]:
    """For each row as a premise, a hypothesis of each label drawn from the other rows, as
    SNLI has for each premise (what --loss mnrl --hard-negatives needs: an entailment and a
    contradiction of the same premise); a premise with no row of some label is left out."""
    records = []
    for index, premise in enumerate(rows[:len(rows) // 3]):
        others = rows[:index] + rows[index + 1:]
        by_label = {label: [row for row in others if pair_label("MNLI", premise, row) == label]
                    for label in ("entailment", "neutral", "contradiction")}
        if all(by_label.values()):
            records.extend({"premise": premise[0], "hypothesis": rng.choice(candidates)[0],
                            "label": label} for label, candidates in by_label.items())
    return records


def write_pairs(directory: str, seed: int = 0) -> dict[str, str]:
    """Writes FILES into `directory`; returns {path: description}."""
    rng = random.Random(seed * 100 + 99)  # apart from the GLUE tasks' seeds 0..8
    paths = {name: files.join(directory, name) for name in FILES}
    for split, count, evaluation in (("train", 200, False), ("dev", 50, True)):
        rows = sentiment_rows(2 * count, rng, evaluation)
        pairs = list(zip(rows[0::2], rows[1::2]))
        files.write_text(paths[f"pairs_{split}.jsonl"], _lines(
            {"sentence1": first[0], "sentence2": second[0],
             "score": similarity_score(first, second)} for first, second in pairs))
        files.write_text(paths[f"nli_{split}.jsonl"], _lines(nli_records(rows, rng)))
    return {paths[name]: description for name, description in FILES.items()}
