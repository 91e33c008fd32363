"""The flags of `bert-jax finetune TASK`, apart from the task modules (which import JAX and Flax),
so that `bert-jax finetune TASK --help` answers at once (it took 6-8 s on a loaded machine).

The flags every task shares take their defaults from `Settings`
(bert_jax/training/finetune_settings.py); `TASK_ARGUMENTS[name](parser)` adds one task's
own, and each task class's `add_arguments` calls the same function. The defaults the task
modules use (QA windows, the sentence-embedding losses, the ways to join frozen layers) are
defined here, once.
"""

import dataclasses

from input_pipeline.tasks import columns, label_rules


@dataclasses.dataclass(frozen=True)
class QuestionAnsweringSettings:
    doc_stride: int = 128  # tokens between the starts of a context's windows
    max_query_len: int = 64  # question tokens kept
    n_best: int = 20  # start and end candidates per window, and answers kept per question
    max_answer_len: int = 30  # longest answer in tokens
    null_threshold: float = 0.0  # v2.0: answer "" when null score - best span score exceeds it
    version_2: bool = False  # trained on v2.0 (unanswerable questions): predict "" too


# Sentence-embedding objectives, and how a frozen encoder's layers are joined for a head.
LOSSES = ("cosine", "cosent", "mnrl", "softmax")
COMBINE_MODES = ("concat", "sum", "scalar-mix")


def _change_defaults(parser, defaults: dict) -> None:
    """A task's recipe where it differs from the paper's common one (flags already added)."""
    for action in parser._actions:
        new = defaults.get(action.dest)
        if new is not None:
            action.default = new
            action.help = f"{action.help.split(' (default')[0]} (default {new})"


def sentence_pairs(parser) -> None:
    """classify and regress: which columns hold the texts and the label."""
    parser.add_argument(
        "--text-columns", default="", metavar="A[,B]",
        help="the text column, or two for a pair: header names or 0-based indices "
             "(JSONL: keys); default every column but the label")
    parser.add_argument(
        "--label-column", default="label", metavar="COLUMN",
        help="the label column: a header name or a 0-based index (JSONL: key); "
             "default label")
    columns.add_reading_arguments(parser)


def labels_as_written(parser) -> None:
    """The tasks that train classes: keep labels that differ only by case or number spelling
    apart (`input_pipeline/tasks/label_rules.py`)."""
    parser.add_argument(
        label_rules.AS_WRITTEN_FLAG, action="store_true",
        help="keep labels that differ only by letter case or by how a number is written "
             "(pos/Pos, 1/1.0) as separate classes (default: refused, naming their lines)")


def classify(parser) -> None:
    sentence_pairs(parser)
    labels_as_written(parser)


def ner(parser) -> None:
    group = parser.add_argument_group("ner (CoNLL: `token ... TAG` a line, blank line "
                                      "between sentences, -DOCSTART- skipped)")
    group.add_argument("--tag-column", type=int, default=-1,
                       help="0-based field of the entity tag, negative from the end "
                            "(default -1: the last)")
    group.add_argument("--tag-scheme", choices=("auto", "iob1", "iob2"), default="auto",
                       help="tag scheme of the files; IOB1 is converted to IOB2 (default "
                            "auto: IOB1 if an entity opens with I-)")
    group.add_argument(label_rules.AS_WRITTEN_FLAG, action="store_true",
                       help="keep entity types that differ only by letter case (PER/Per) as "
                            "separate types (default: refused, naming their lines)")
    group.add_argument("--label-all-subwords", action="store_true",
                       help="label every word piece (B- becomes I- after the first), "
                            "not just the first piece of each word")
    group.add_argument("--freeze-encoder", action="store_true",
                       help="feature-based: train only a head over frozen encoder layers")
    group.add_argument("--layers", default="-4,-3,-2,-1",
                       help="with --freeze-encoder: layers the head reads, 0 = embedding "
                            "output, negatives from the last (default -4,-3,-2,-1)")
    group.add_argument("--combine", choices=COMBINE_MODES, default="concat",
                       help="with --freeze-encoder: join the layers by concatenation, sum, "
                            "or ELMo's scalar mix (default concat)")


def question_answering(parser) -> None:
    defaults = QuestionAnsweringSettings()
    # The original run_squad.py's recipe: windows of 384 tokens, lr 3e-5, 2 epochs.
    _change_defaults(parser, {"max_seq_len": 384, "learning_rate": 3e-5, "epochs": 2})
    parser.add_argument("--doc-stride", type=int, default=defaults.doc_stride,
                        help="tokens between the starts of a long context's windows "
                             f"(default {defaults.doc_stride})")
    parser.add_argument("--max-query-len", type=int, default=defaults.max_query_len,
                        help="question tokens kept, longer questions truncated with a "
                             f"warning (default {defaults.max_query_len})")
    parser.add_argument("--n-best", type=int, default=defaults.n_best,
                        help="start/end candidates per window and answers kept per "
                             f"question (default {defaults.n_best})")
    parser.add_argument("--max-answer-len", type=int, default=defaults.max_answer_len,
                        help=f"longest answer in tokens (default {defaults.max_answer_len})")
    parser.add_argument("--null-threshold", type=float, default=defaults.null_threshold,
                        help="SQuAD v2.0: predict no answer when the null score minus the "
                             "best span's exceeds this (default 0.0)")


def masked_lm(parser) -> None:
    _change_defaults(parser, {"learning_rate": 5e-5, "epochs": 1})  # one pass, higher rate
    parser.add_argument("--masked-lm-prob", type=float, default=0.15,
                        help="share of tokens masked, 80%% [MASK] / 10%% kept / 10%% "
                             "random (default 0.15)")


def sentence_embedding(parser) -> None:
    from bert_jax.commands import POOLING

    parser.add_argument("--loss", choices=LOSSES, default="cosent",
                        help="cosine (MSE to the scaled score), cosent (ranking), mnrl "
                             "(in-batch negatives over the global batch, scale 20), softmax "
                             "(NLI classifier on (u, v, |u-v|)); default cosent")
    parser.add_argument("--pooling", choices=POOLING, default="mean",
                        help="how token vectors become one embedding, as `embed --pool` "
                             "(default mean)")
    parser.add_argument("--hard-negatives", action="store_true",
                        help="with --loss mnrl: add each premise's contradiction "
                             "hypothesis as a hard negative")
    parser.add_argument("--score-max", type=float, default=5.0,
                        help="with --loss cosine: gold scores are divided by this to lie "
                             "in 0..1 (default 5, STS-B's scale)")
    parser.add_argument(label_rules.SKIP_FLAG, action="store_true",
                        help="skip rows whose label cell is empty, and say how many on "
                             "stderr (default: such a row is an error naming its line)")
    labels_as_written(parser)


TASK_ARGUMENTS = {
    "classify": classify,
    "regress": sentence_pairs,
    "ner": ner,
    "qa": question_answering,
    "mlm": masked_lm,
    "sentence-embedding": sentence_embedding,
}
