"""Entity-level scores of tag sequences, computed by seqeval (the library that defines them).

An entity counts as found only if its type and both its ends match the gold entity.
Tags are IOB2 (conll.py converts IOB1 on reading) and scored in seqeval's strict IOB2
mode: a predicted I-X that follows O or another type starts no entity there, where the
lenient default (conlleval's rule) would repair it into one.
"""

from collections.abc import Sequence

from seqeval.metrics import accuracy_score, classification_report
from seqeval.scheme import IOB2


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
    """Micro-averaged entity `precision`, `recall`, `f1`, word `accuracy`, and `per_type`.

    `per_type` maps each entity type to its precision, recall, f1 and support (the number
    of gold entities). Sentences pair up in order and must have equal lengths.
    """
    gold, predicted = [list(tags) for tags in gold], [list(tags) for tags in predicted]
    for index, (expected, found) in enumerate(zip(gold, predicted, strict=True)):
        if len(expected) != len(found):
            raise ValueError(f"sentence {index}: {len(expected)} gold tags, {len(found)} "
                             "predicted")
    report = classification_report(gold, predicted, mode="strict", scheme=IOB2,
                                   output_dict=True, zero_division=0)
    micro = report.pop("micro avg")
    per_type = {name: dict(precision=float(scores["precision"]),
                           recall=float(scores["recall"]), f1=float(scores["f1-score"]),
                           support=int(scores["support"]))
                for name, scores in report.items() if not name.endswith(" avg")}
    return dict(precision=float(micro["precision"]), recall=float(micro["recall"]),
                f1=float(micro["f1-score"]), accuracy=float(accuracy_score(gold, predicted)),
                per_type=per_type)
