"""Fine-tuning UltraBERT (loss, gradients, clipping, AdamW, schedule) against transformers'
`UltrabertForSequenceClassification` trained with `torch.optim.AdamW`,
from the same random weights, through tests/test_modernbert_finetune.py's four steps (decay
on all but RMSNorm parameters and biases, clipping at 1, BERT's warm-up/decay schedule).

Bounds as there: losses rtol 1e-4, gradient norms rtol 1e-3 (float32 both sides, sums in
different orders; four AdamW steps carry a gradient's rounding into the weights at most as
lr x its relative rounding).
"""

from test_modernbert_finetune import steps_equal_pytorch_adamw
from test_ultrabert import hf_model


def test_fine_tuning_steps_equal_pytorch_adamw_on_transformers_ultrabert(tmp_path):
    """Mean pooling (cls is the first row of the same states); the gradients flow through
    the sliding layers' window (rows of up to 16 tokens, window 4) and the classifier with
    no dense layer before it. The token classifier is EuroBERT's own (test_eurobert_finetune
    .py's ner)."""
    labels = ["a", "b", "c"]
    model = hf_model("UltrabertForSequenceClassification", tmp_path, seed=2,
                     num_labels=len(labels), classifier_pooling="mean")
    steps_equal_pytorch_adamw(model, tmp_path, "classify", labels)
