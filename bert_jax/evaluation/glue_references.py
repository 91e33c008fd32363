"""Published GLUE dev scores, as data: the rows `bert-jax glue --compare NAME` prints beside a run.

Every figure is copied from the source named with it, as printed there (percent); how the
source aggregated its runs is said beside it, since they differ (median of five, mean over
seeds, best grid point, mean over pre-training seeds) and a row is comparable only with a
table aggregated alike. ../shared/REFERENCES-evaluation.md (section 1) collects them. Where
a source prints one number for MNLI it stands for matched; two-figure cells are as printed
(RoBERTa-large's MNLI m/mm). Which metric [MB] Table 5 prints for MRPC, QQP and STS-B is
not stated there. Test-server figures (BERT's Table 1) are not dev figures and are not here.
"""

import dataclasses

from bert_jax.errors import UserError

COLUMNS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")


@dataclasses.dataclass(frozen=True)
class Reference:
    label: str
    scores: tuple  # COLUMNS' figures, each a tuple of the numbers printed (percent)
    average: float | None  # as the source reports it; None where it reports none
    source: str
    aggregation: str


def _row(*figures) -> tuple:
    return tuple(figure if isinstance(figure, tuple) else (figure,) for figure in figures)


_MB = "Warner et al. 2024 (ModernBERT), appendix E.1 Table 5; average from Table 1"
REFERENCES = {
    "bert-base": Reference(
        "BERT-base", _row(59.0, 93.1, 89.5, 89.4, 91.4, 85.4, 91.6, 78.2), 84.7,
        _MB + " (row β, from MosaicBERT's Table S3)", "not stated"),
    "bert-large": Reference(
        "BERT-large", _row(56.2, 93.3, 87.8, 90.6, 90.9, 86.3, 92.8, 83.8), 85.2,
        _MB + " (row β, from MosaicBERT's Table S3)", "not stated"),
    "roberta-base": Reference(
        "RoBERTa-base", _row(63.6, 94.8, 90.2, 91.2, 91.9, 87.6, 92.8, 78.7), 86.4,
        "facebookresearch/fairseq examples/roberta/README.md (dev, single-task); average "
        "from [MB] Table 1", "not stated in the README"),
    "roberta-large": Reference(
        "RoBERTa-large", _row(68.0, 96.4, 90.9, 92.4, 92.2, (90.2, 90.2), 94.7, 86.6), 88.9,
        "Liu et al. 2019 (RoBERTa), GLUE dev table; average from [MB] Table 1",
        "median over five runs; RTE, STS-B and MRPC started from the MNLI model"),
    "modernbert-base": Reference(
        "ModernBERT-base", _row(65.1, 96.0, 92.2, 91.8, 92.1, 89.1, 93.9, 87.4), 88.4, _MB,
        "not stated in the paper (the repository's glue.py: mean over 3 seeds); RTE, MRPC "
        "and STS-B from the MNLI checkpoint; per-task hyperparameter search"),
    "modernbert-large": Reference(
        "ModernBERT-large", _row(71.4, 97.1, 91.7, 92.8, 92.7, 90.8, 95.2, 92.1), 90.4, _MB,
        "as modernbert-base"),
    "neobert": Reference(
        "NeoBERT-4096", _row(66.2, 95.6, 93.4, 91.8, 90.7, 89.0, 93.7, 91.3), 89.0,
        "Le Breton et al. 2025 (NeoBERT), Table 3",
        "best point of a hyperparameter grid, one seed; QNLI, STS-B, MRPC, RTE from MNLI"),
    "mosaicbert-base": Reference(
        "MosaicBERT-Base", _row(55.11, 92.46, 90.03, 89.27, 90.29, 84.95, 90.74, 81.36),
        84.28, "mosaicml/mosaic-bert-base model card (MNLI: one number for m/mm)",
        "mean over five pre-training seeds; RTE, MRPC, STS-B from the MNLI checkpoint"),
}


def reference(name: str) -> Reference:
    if name not in REFERENCES:
        raise UserError(f"--compare {name!r}: expected one of {', '.join(REFERENCES)}")
    return REFERENCES[name]
