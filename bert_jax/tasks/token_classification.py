"""`ner`: a label for every word (named entities in CoNLL files).

Words become word pieces (`input_pipeline/tasks/word_labels.py`): the first piece of each
word carries its IOB2 label, the other pieces weigh nothing in the loss (or, with
`label_all_subwords`, carry the I- label). The loss is the cross-entropy summed over the
labelled pieces, divided by a count summed per row (`token_loss_count`), so its mean is
exact over micro-batches and hosts. In evaluation a row counts its own labelled pieces: the
exact mean. In training it counts the training file's mean per row (`TrainingBatches`):
fine-tuning's batches hold rows of similar length, and dividing a batch of short sentences
by its own few pieces would weigh each of their tokens up to ten times more than a token
of a long sentence. Divided by the expected count every token weighs the same, as it does
on average in random batches (MiniLM, one epoch of CoNLL-2003, seed 0: dev F1 0.8242 by
each batch's own count, 0.8308 by the mean; 0.8370 with random batches, which train 2.2x
slower for their padding).

Predictions are read at each word's first piece and scored per entity with seqeval
(`entity_metrics.py`); a sentence longer than `max_seq_len` pieces is split into windows
whose predictions are joined again.

With `freeze_encoder` the encoder does not train: a head reads its chosen layers combined
(`bert_jax/models/frozen_encoder_heads.py`), the feature-based approach of the BERT paper's Table 7.
"""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np

from bert_jax.storage import files, json_values
from bert_jax import losses
from bert_jax.models.config import BertConfig, Precision
from bert_jax.errors import UserError
from bert_jax.tasks import arguments
from bert_jax.training.task import Examples, FineTuningTask
from bert_jax.training.batching import BucketedBatches

SEQUENCE_FEATURES = ("input_ids", "segment_ids", "input_mask", "labels", "label_weights")
LOSS_COUNT = "token_loss_count"  # (N,) float: what a row adds to the token loss's divisor


@dataclasses.dataclass(frozen=True)
class NerSettings:
    label_names: tuple[str, ...]  # IOB2 labels, id = position; "O" first
    tag_column: int = -1  # the CoNLL field holding the tag (0-based, negative from the end)
    tag_scheme: str = "auto"  # the files' scheme: iob1, iob2 or auto (IOB2 inside)
    label_all_subwords: bool = False  # every piece carries a label (B- -> I- after the first)
    freeze_encoder: bool = False  # feature-based: only the layer combination and head train
    layers: tuple[int, ...] = (-4, -3, -2, -1)  # frozen layers the head reads (0 = embeddings)
    combine: str = "concat"  # concat | sum | scalar-mix


@dataclasses.dataclass
class NerExamples(Examples):
    """Examples are windows (`rows`); `sentences` are the file's, for words and columns, and
    `documents` its -DOCSTART- lines (`conll.CoNLLFile.documents`), written back in place."""
    sentences: list = dataclasses.field(default_factory=list)
    documents: tuple = ()


@dataclasses.dataclass(frozen=True)
class NerGold:
    windows: list  # word_labels.Window per example, in example order
    tags: list  # IOB2 tags of every word, per sentence


class TrainingBatches(BucketedBatches):
    """Training batches whose rows count the training file's mean labelled pieces per row
    toward the token loss's divisor, instead of their own (see the module's docstring)."""

    def __init__(self, features: dict, *args, **options):
        counts = features[LOSS_COUNT]
        features = dict(features, **{LOSS_COUNT: np.full_like(counts, counts.mean())})
        super().__init__(features, *args, **options)


class TokenClassificationTask(FineTuningTask):
    name = "ner"
    terms = {"token_loss": LOSS_COUNT, "token_accuracy": "num_labelled"}
    objective = ("token_loss",)
    logged = ("loss", "token_accuracy", "grad_norm", "learning_rate")
    evaluated = ("loss", "token_accuracy")
    best_metric, greater_is_better = "f1", True
    training_batches = TrainingBatches

    def __init__(self, settings: NerSettings):
        self.ner = settings
        self.label_ids = {label: index for index, label in enumerate(settings.label_names)}

    # -- flags and saved settings ----------------------------------------------------------

    @classmethod
    def add_arguments(cls, parser) -> None:
        arguments.ner(parser)

    @classmethod
    def from_arguments(cls, args, tokenizer) -> "TokenClassificationTask":
        from bert_jax.inference import parse_layers
        from input_pipeline.tasks.conll import label_names, read_conll

        from input_pipeline.tasks.label_rules import check_spellings

        train = read_conll(args.train, args.tag_column, args.tag_scheme)
        check_spellings([(tag[2:], sentence.line + offset) for sentence in train.sentences
                         for offset, tag in enumerate(sentence.tags) if tag != "O"],
                        args.train, "entity type", args.labels_as_written)
        return cls(NerSettings(
            label_names=tuple(label_names(train.sentences)), tag_column=args.tag_column,
            tag_scheme=args.tag_scheme, label_all_subwords=args.label_all_subwords,
            freeze_encoder=args.freeze_encoder, layers=tuple(parse_layers(args.layers)),
            combine=args.combine))

    @classmethod
    def from_settings(cls, settings: dict) -> "TokenClassificationTask":
        values = dict(settings)
        values["label_names"] = tuple(values["label_names"])  # all an HF directory gives
        if "layers" in values:
            values["layers"] = tuple(values["layers"])
        return cls(NerSettings(**values))

    def settings(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self.ner)))  # tuples -> lists

    def head(self) -> dict | None:
        """The HF architecture this model exports as; none for a frozen-layer head."""
        if self.ner.freeze_encoder:
            return None
        return dict(architecture="BertForTokenClassification",
                    label_names=list(self.ner.label_names))

    # -- model and loss --------------------------------------------------------------------

    def build_model(self, model_config: BertConfig, precision: Precision):
        num_labels = len(self.ner.label_names)
        if self.ner.freeze_encoder:
            from bert_jax.models.frozen_encoder_heads import FrozenEncoderTokenClassifier
            from bert_jax.inference import resolve_layers

            layers = resolve_layers(self.ner.layers, model_config.num_layers)
            return FrozenEncoderTokenClassifier(model_config, num_labels, layers,
                                                self.ner.combine, precision)
        from bert_jax.models.families import family_of

        return family_of(model_config).token_classifier(model_config, num_labels, precision)

    def trainable(self):
        if not self.ner.freeze_encoder:
            return None
        return lambda names: names[0] != "bert"

    def batch_schema(self):
        schema = {name: (np.dtype(np.int32), lambda batch, seq_len: (batch, seq_len))
                  for name in SEQUENCE_FEATURES}
        schema[LOSS_COUNT] = (np.dtype(np.float32), lambda batch, seq_len: (batch,))
        return schema

    def model_inputs(self, batch):
        return batch["input_ids"], batch["segment_ids"], batch["input_mask"]

    def counts(self, batch):
        return {"num_labelled": jnp.sum(batch["label_weights"].astype(jnp.float32)),
                LOSS_COUNT: jnp.sum(batch[LOSS_COUNT])}

    def sums(self, logits, batch):
        """(B, T, C) logits: cross-entropy and correct pieces summed over labelled pieces."""
        sums = losses.classification_sums(logits, batch["labels"], batch["label_weights"])
        return {"token_loss": sums["loss"], "token_accuracy": sums["accuracy"]}

    # -- data, predictions, metrics (host side) --------------------------------------------

    def read_examples(self, path: str, tokenizer, max_seq_len: int,
                      with_labels: bool = True) -> NerExamples:
        from input_pipeline.tasks.conll import check_known_tags, read_conll

        data = read_conll(path, self.ner.tag_column if with_labels else None,
                          self.ner.tag_scheme)
        tags = [sentence.tags for sentence in data.sentences] if with_labels else None
        if with_labels:
            check_known_tags(data, self.ner.label_names)
        examples = self._examples(path, data.sentences, tags, tokenizer, max_seq_len)
        examples.documents = data.documents
        return examples

    def examples_from_inputs(self, inputs, tokenizer, max_seq_len) -> NerExamples:
        """Each input a sentence: a string (words split at white space) or a list of words."""
        from input_pipeline.tasks.conll import Sentence

        sentences = []
        for number, value in enumerate(inputs, start=1):
            words = value.split() if isinstance(value, str) else list(value)
            if not words or not all(isinstance(word, str) and word.strip() and
                                    len(word.split()) == 1 for word in words):
                raise UserError(f"input {number}: expected a sentence (a string or a list of "
                                f"words without spaces, at least one), got {value!r}")
            sentences.append(Sentence(tuple((word,) for word in words), None, number))
        return self._examples("input", sentences, None, tokenizer, max_seq_len)

    def _examples(self, path, sentences, tags, tokenizer, max_seq_len) -> NerExamples:
        from input_pipeline.tasks import word_labels

        windows = word_labels.align(
            tokenizer, [sentence.words for sentence in sentences], tags, self.label_ids,
            max_seq_len, self.ner.label_all_subwords)
        features = word_labels.pad_windows(windows, max(len(w.input_ids) for w in windows))
        features[LOSS_COUNT] = features["label_weights"].sum(axis=1).astype(np.float32)
        gold = NerGold(windows, tags) if tags is not None else None
        return NerExamples(path, features, gold, windows, sentences)

    def num_inputs(self, examples: NerExamples) -> int:
        return len(examples.sentences)  # examples.rows are the sentences' windows

    def prediction_values(self, examples: NerExamples, predictions) -> list[dict]:
        """{"words", "tags"} per sentence: the `.jsonl` lines `write_predictions` writes."""
        tags = self.word_tags(examples.rows, predictions["labels"], len(examples.sentences))
        return [{"words": list(sentence.words), "tags": sentence_tags}
                for sentence, sentence_tags in zip(examples.sentences, tags)]

    def predictions(self, logits, batch):
        return {"labels": np.argmax(logits, axis=-1).astype(np.int32)}  # (B, T) per piece

    def word_tags(self, windows, piece_labels, num_sentences: int) -> list[list[str]]:
        from input_pipeline.tasks.word_labels import word_predictions

        return [[self.ner.label_names[label] for label in sentence]
                for sentence in word_predictions(windows, piece_labels, num_sentences)]

    def evaluate(self, predictions, gold: NerGold) -> dict:
        """seqeval's entity precision, recall, f1 (strict IOB2), word accuracy, per type."""
        from bert_jax.tasks.entity_metrics import entity_scores

        predicted = self.word_tags(gold.windows, predictions["labels"], len(gold.tags))
        scores = entity_scores(gold.tags, predicted)
        per_type = scores.pop("per_type")
        for name, values in per_type.items():
            scores.update({f"{name}_{metric}": value for metric, value in values.items()})
        return scores

    def write_predictions(self, path: str, examples: NerExamples, predictions) -> None:
        """CoNLL: each input line plus the predicted tag; `.jsonl`: words and tags a line."""
        from input_pipeline.tasks.conll import write_conll

        values = self.prediction_values(examples, predictions)
        if not path.endswith(".jsonl"):
            write_conll(path, examples.sentences, [value["tags"] for value in values],
                        examples.documents)
            return
        with files.atomic_write(path) as file:
            for value in values:
                file.write(json_values.dumps(value, ensure_ascii=False) + "\n")


TASK = TokenClassificationTask
