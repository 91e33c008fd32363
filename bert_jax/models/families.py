"""The encoder families bert-jax runs, each behind one interface.

Tasks, training, inference and interop ask `family_of(model_config)` for a model instead of
naming a family's classes, so a task's head, loss and data are written once for every
family. A family is its config class (in `bert_jax/models/config.py`, side by side), its
modules (`bert.py` + `bert_heads.py`, ...), and the top-level params key its encoder sits
under. Every model takes the same arguments: (input_ids, segment_ids, input_mask[, positions],
train) and, for packed rows, `instance_ids` / `position_ids`; a family without segment
embeddings ignores segment_ids.
"""

import dataclasses
import importlib

from bert_jax.errors import UserError
from bert_jax.models.config import BertConfig, EuroBertConfig, ModernBertConfig


@dataclasses.dataclass(frozen=True)
class Family:
    name: str  # as model_config.json's "family" spells it
    config_class: type
    encoder_key: str  # the params key of the encoder ("bert": every BERT checkpoint's)
    modules: str  # the module holding the encoder and its pre-training heads
    heads: str  # the module holding its task heads
    # class names in those modules (None: the family has no such model)
    encoder_class: str
    pretraining_class: str | None
    masked_lm_class: str
    sequence_classifier_class: str
    token_classifier_class: str
    question_answering_class: str | None

    def _class(self, module: str, name: str | None, what: str):
        if name is None:
            raise UserError(f"a {self.name} model has no {what}")
        return getattr(importlib.import_module(module), name)

    def encoder(self, config, precision=None, with_pooler: bool = True, name: str | None = None):
        """The encoder alone: returns (sequence_output (B, T, H), pooled (B, H) or None)."""
        cls = self._class(self.modules, self.encoder_class, "encoder")
        return cls(config, **_precision(precision), with_pooler=with_pooler, name=name)

    def pretraining_model(self, config, precision=None):
        """The family's pre-training objective's model (BERT: masked LM and NSP)."""
        cls = self._class(self.modules, self.pretraining_class, "next-sentence pre-training")
        return cls(config, **_precision(precision))

    def masked_lm_model(self, config, precision=None):
        """Masked-LM logits at gathered positions."""
        return self._class(self.heads, self.masked_lm_class, "masked-LM head")(
            config, **_precision(precision))

    def sequence_classifier(self, config, num_labels: int, precision=None):
        """Logits (B, num_labels) for a text or pair (classification, regression)."""
        return self._class(self.heads, self.sequence_classifier_class, "sequence classifier")(
            config, num_labels, **_precision(precision))

    def token_classifier(self, config, num_labels: int, precision=None):
        """Logits (B, T, num_labels) at every position (NER)."""
        return self._class(self.heads, self.token_classifier_class, "token classifier")(
            config, num_labels, **_precision(precision))

    def question_answering(self, config, precision=None):
        """Span start and end logits, each (B, T) (where the config's variant has them:
        UltraBERT's, not EuroBERT's)."""
        name = self.question_answering_class if getattr(config, "has_span_head", True) else None
        return self._class(self.heads, name, "span head")(config, **_precision(precision))


def _precision(precision) -> dict:
    return {} if precision is None else {"precision": precision}


BERT = Family(
    name="bert", config_class=BertConfig, encoder_key="bert",
    modules="bert_jax.models.bert", heads="bert_jax.models.bert_heads",
    encoder_class="BertModel", pretraining_class="BertForPreTraining",
    masked_lm_class="BertForMaskedLM",
    sequence_classifier_class="BertForSequenceClassification",
    token_classifier_class="BertForTokenClassification",
    question_answering_class="BertForQuestionAnswering")

MODERNBERT = Family(
    name="modernbert", config_class=ModernBertConfig, encoder_key="modernbert",
    modules="bert_jax.models.modernbert", heads="bert_jax.models.modernbert_heads",
    encoder_class="ModernBertModel", pretraining_class=None,
    masked_lm_class="ModernBertForMaskedLM",
    sequence_classifier_class="ModernBertForSequenceClassification",
    token_classifier_class="ModernBertForTokenClassification",
    question_answering_class="ModernBertForQuestionAnswering")

EUROBERT = Family(
    name="eurobert", config_class=EuroBertConfig, encoder_key="eurobert",
    modules="bert_jax.models.eurobert", heads="bert_jax.models.eurobert_heads",
    encoder_class="EuroBertModel", pretraining_class=None,
    masked_lm_class="EuroBertForMaskedLM",
    sequence_classifier_class="EuroBertForSequenceClassification",
    token_classifier_class="EuroBertForTokenClassification",
    # UltraBERT's (transformers has no EuroBertForQuestionAnswering: config.has_span_head)
    question_answering_class="EuroBertForQuestionAnswering")

FAMILIES = {family.name: family for family in (BERT, MODERNBERT, EUROBERT)}


def family_of(config) -> Family:
    """The family of a model config (a `BertConfig`, ...)."""
    for family in FAMILIES.values():
        if type(config) is family.config_class:
            return family
    raise TypeError(f"no model family has config class {type(config).__name__}")


def config_from_dict(values: dict, source: str = "config"):
    """A model config from model_config.json's values: its "family" (absent in files written
    before there were two: BERT) picks the config class, which refuses unknown keys."""
    values = dict(values)
    name = values.pop("family", "bert")
    if name not in FAMILIES:
        raise UserError(f"{source}: unknown model family {name!r}; expected one of "
                        f"{sorted(FAMILIES)}")
    return FAMILIES[name].config_class.from_dict(values, source=source)


def config_to_dict(config) -> dict:
    """model_config.json's values: the config's fields and its family."""
    return {"family": family_of(config).name, **config.to_dict()}
