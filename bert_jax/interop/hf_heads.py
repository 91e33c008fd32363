"""Task heads in Hugging Face directories: sequence and token classifiers (config.json label
fields, the `classifier.*` tensors) and the span head (two outputs, no labels), of either
family; each family's module (`hf_bert.py`, `hf_modernbert.py`) names their tensors.

A head is described by a small dict, the same in task.json and here; its "architecture" is
the head's kind, named by BERT's class (task.json files predate ModernBERT), which a
ModernBERT export writes as its own class (`hf_modernbert.HEAD_ARCHITECTURES`):
  {"architecture": "BertForSequenceClassification" | "BertForTokenClassification",
   "label_names": [...], "problem_type": "single_label_classification" | "regression",
   "columns": {...}}   (a sentence task's recorded columns, config.json's `bert_jax_columns`)
  {"architecture": "BertForQuestionAnswering"}
"""

from bert_jax.errors import UserError

SEQUENCE, TOKEN = "BertForSequenceClassification", "BertForTokenClassification"
SPAN = "BertForQuestionAnswering"  # start and end logits: HF's num_labels = 2, no label names
KINDS = (SEQUENCE, TOKEN, SPAN)
# A transformers class -> the head kind it has.
_KIND_OF = {SEQUENCE: SEQUENCE, TOKEN: TOKEN, SPAN: SPAN,
            "ModernBertForSequenceClassification": SEQUENCE,
            "ModernBertForTokenClassification": TOKEN,
            "ModernBertForQuestionAnswering": SPAN,
            "EuroBertForSequenceClassification": SEQUENCE,
            "EuroBertForTokenClassification": TOKEN,
            "UltrabertForSequenceClassification": SEQUENCE,
            "UltrabertForTokenClassification": TOKEN,
            "UltrabertForQuestionAnswering": SPAN}
REGRESSION = "regression"
# The columns a sentence task read (task.json's settings.columns), kept in an exported
# config.json so that the model reads the same columns when it comes back; transformers
# keeps an unknown field as an attribute and ignores it.
COLUMNS_FIELD = "bert_jax_columns"


def classifier_shapes(config, num_labels: int) -> dict:
    return {("classifier", "kernel"): (config.hidden_dim, num_labels),
            ("classifier", "bias"): (num_labels,)}


def head_shapes(config, head: dict) -> dict:
    if head["architecture"] == SPAN:
        return {("qa_outputs", "kernel"): (config.hidden_dim, 2), ("qa_outputs", "bias"): (2,)}
    return classifier_shapes(config, len(head["label_names"]))


def config_fields(head: dict) -> dict:
    """The config.json fields of a head: num_labels, id2label, label2id, problem_type."""
    if head["architecture"] == SPAN:
        return dict(num_labels=2)
    names = list(head["label_names"])
    columns = {COLUMNS_FIELD: head["columns"]} if "columns" in head else {}
    return dict(num_labels=len(names), id2label={str(index): name for index, name in
                                                 enumerate(names)},
                label2id={name: index for index, name in enumerate(names)},
                problem_type=head.get("problem_type", "single_label_classification"), **columns)


def head_from_config(values: dict, source: str) -> dict | None:
    """The head an HF config.json describes, or None for a model without one of ours."""
    architectures = values.get("architectures") or []
    if not architectures or architectures[0] not in _KIND_OF:
        return None
    kind = _KIND_OF[architectures[0]]
    if kind == SPAN:
        outputs = values.get("num_labels", len(values.get("id2label") or {}) or 2)
        if outputs != 2:
            raise UserError(f"{source}: a {architectures[0]} with {outputs} outputs "
                            "(num_labels); expected 2 (span start and end)")
        return dict(architecture=SPAN)
    id2label = values.get("id2label") or {}
    num_labels = values.get("num_labels", len(id2label) or 2)
    if id2label and len(id2label) != num_labels:
        raise UserError(f"{source}: num_labels is {num_labels} but id2label has "
                        f"{len(id2label)} entries")
    names = [str(id2label.get(str(index), id2label.get(index, f"LABEL_{index}")))
             for index in range(num_labels)]
    problem_type = values.get("problem_type") or (
        REGRESSION if num_labels == 1 else "single_label_classification")
    columns = {"columns": values[COLUMNS_FIELD]} if COLUMNS_FIELD in values else {}
    return dict(architecture=kind, label_names=names, problem_type=problem_type, **columns)
