"""No JSON output holds a bare NaN (issue 24, 4.1): Python's json writes float('nan') as
`NaN`, which strict readers (jq, JSON.parse) reject; bert-jax writes null instead."""

import json

import numpy as np
from interop_helpers import write_vocab

from bert_jax.storage import json_values
from input_pipeline.tokenization import load_tokenizer


def strict_loads(text: str):
    """json.loads that rejects NaN and Infinity, as RFC 8259 readers do."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_become_null_and_numpy_values_python_ones():
    value = {"nan": np.float32("nan"), "list": [1.5, float("inf"), -np.inf],
             "array": np.array([[0.25, np.nan]]), "count": np.int64(3), "flag": np.bool_(True),
             "text": "NaN", "pair": (np.float64(2.0), None)}
    assert strict_loads(json_values.dumps(value)) == {
        "nan": None, "list": [1.5, None, None], "array": [[0.25, None]], "count": 3,
        "flag": True, "text": "NaN", "pair": [2.0, None]}


def test_predictions_with_nan_probabilities_are_valid_json(tmp_path):
    from bert_jax.tasks import task_module

    tokenizer = load_tokenizer(write_vocab(tmp_path))
    task = task_module("classify").TASK.from_settings({"label_names": ["neg", "pos"]})
    examples = task.examples_from_inputs(["the man went", "he was happy"], tokenizer, 16)
    predictions = {"label": np.array([0, 1]),
                   "probabilities": np.array([[np.nan, np.nan], [0.25, 0.75]], np.float32)}
    output = tmp_path / "predictions.jsonl"
    task.write_predictions(str(output), examples, predictions)
    rows = [strict_loads(line) for line in output.read_text().splitlines()]
    assert [row["probabilities"] for row in rows] == [{"neg": None, "pos": None},
                                                      {"neg": 0.25, "pos": 0.75}]
