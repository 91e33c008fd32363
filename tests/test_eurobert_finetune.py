"""Fine-tuning EuroBERT (loss, gradients, clipping, AdamW, schedule) against transformers'
`EuroBertFor{SequenceClassification,TokenClassification}` trained with `torch.optim.AdamW`,
from the same random weights, through tests/test_modernbert_finetune.py's four steps (decay
on all but RMSNorm parameters and biases, clipping at 1, BERT's warm-up/decay schedule).

Bounds as there: losses rtol 1e-4, gradient norms rtol 1e-3 (float32 both sides, sums in
different orders; four AdamW steps carry a gradient's rounding into the weights at most as
lr x its relative rounding).
"""

import pytest
from eurobert_helpers import hf_model
from test_modernbert_finetune import steps_equal_pytorch_adamw

ARCHITECTURES = {"classify": "EuroBertForSequenceClassification",
                 "regress": "EuroBertForSequenceClassification",
                 "ner": "EuroBertForTokenClassification"}


@pytest.mark.parametrize("task_name, labels, pooling", [
    ("classify", ["a", "b", "c"], "late"), ("regress", ["LABEL_0"], "mean"),
    ("ner", ["O", "B-PER", "I-PER", "B-LOC"], "late")])
def test_fine_tuning_steps_equal_pytorch_adamw_on_transformers_eurobert(
        tmp_path, task_name, labels, pooling):
    model = hf_model(ARCHITECTURES[task_name], tmp_path, seed=2, num_labels=len(labels),
                     classifier_pooling=pooling)
    steps_equal_pytorch_adamw(model, tmp_path, task_name, labels)
