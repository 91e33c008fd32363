"""Fine-tuning ModernBERT (loss, gradients, clipping, AdamW, schedule) against transformers'
`ModernBertFor{SequenceClassification,TokenClassification,QuestionAnswering}` trained with
`torch.optim.AdamW`, from the same random weights (read through bert-jax's Hugging Face
reader), on the batches of tests/test_finetune_step_parity.py, all 16 tokens long: four
optimizer steps, decay on all but LayerNorm parameters and biases, clipping at 1, BERT's
warm-up/decay schedule.

Bounds, as the BERT parity test's: losses rtol 1e-4 and gradient norms rtol 1e-3, float32 on
both sides with sums in different orders (a loss is a mean of ~10-100 log-softmax terms of
size ~1, so its rounding is ~1e-6 relative; four AdamW steps, whose first updates are
lr x sign(g) wherever |g| >> eps, carry a gradient's rounding into the weights at most as
lr x (relative rounding), far below 1e-4 of the loss).
"""

import jax
import numpy as np
import pytest
from modernbert_helpers import hf_model
from test_finetune_step_parity import (BATCH, LEARNING_RATE, STEPS, WARMUP, _batches,
                                       _bert_schedule, _real_rows, _torch_labels,
                                       logits_function)

from bert_jax import sharding
from bert_jax.interop import model_source
from bert_jax.training import distributed, finetune, train_step

# Every step 16 tokens long: one compile of the family's step. The length buckets' steps (a
# compile per length, the state carried across them) are the family-blind part, tested on BERT
# in tests/test_finetune_step_parity.py.
FAMILY_LENGTHS = (16,) * STEPS
ARCHITECTURES = {"classify": "ModernBertForSequenceClassification",
                 "ner": "ModernBertForTokenClassification",
                 "qa": "ModernBertForQuestionAnswering"}


def _task(task_name: str, labels: list[str]):
    from bert_jax.tasks.classification import ClassificationTask
    from bert_jax.tasks.question_answering import QuestionAnsweringTask
    from bert_jax.tasks.regression import RegressionTask
    from bert_jax.tasks.token_classification import NerSettings, TokenClassificationTask
    from input_pipeline.tasks.columns import ColumnSpec

    if task_name == "ner":
        return TokenClassificationTask(NerSettings(tuple(labels)))
    if task_name == "qa":
        return QuestionAnsweringTask()
    if task_name == "regress":
        return RegressionTask(labels, ColumnSpec((), "label"))
    return ClassificationTask(labels, ColumnSpec((), "label"))


def _torch_inputs(batch: dict, rows: np.ndarray) -> dict:
    import torch

    return dict(input_ids=torch.tensor(batch["input_ids"][rows], dtype=torch.long),
                attention_mask=torch.tensor(batch["input_mask"][rows], dtype=torch.long))


@pytest.mark.parametrize("task_name, labels", [("classify", ["a", "b", "c"]),
                                               ("ner", ["O", "B-PER", "I-PER", "B-LOC"]),
                                               ("qa", ["start", "end"])])
def test_fine_tuning_steps_equal_pytorch_adamw_on_transformers_modernbert(
        tmp_path, task_name, labels):
    model = hf_model(ARCHITECTURES[task_name], tmp_path, seed=2, num_labels=len(labels))
    steps_equal_pytorch_adamw(model, tmp_path, task_name, labels)


def steps_equal_pytorch_adamw(model, directory, task_name: str, labels: list[str]) -> None:
    """Four steps of bert-jax's fine-tuning on the transformers `model` saved in `directory`
    against the same steps of torch AdamW on it (tests/test_eurobert_finetune.py too)."""
    torch = pytest.importorskip("torch")
    source = model_source.in_directory(str(directory))
    config, params = source.config(), source.load().params
    task = _task(task_name, labels)
    run_config = finetune.run_config_for(
        config, finetune.Settings(epochs=1, learning_rate=LEARNING_RATE, batch_size=BATCH,
                                  max_seq_len=16),
        [f"--config.finetune.warmup_fraction={WARMUP / STEPS}"])
    finetune.schedule_steps(run_config, BATCH * STEPS)
    bundle = train_step.build_train_step(run_config, sharding.mesh_from_config(run_config.mesh),
                                         task=task)
    state = bundle.init_state(jax.random.PRNGKey(0))
    state = state.replace(params=jax.tree.map(
        lambda value, target: jax.device_put(np.asarray(value, np.float32), target.sharding),
        params, state.params))
    logits = logits_function(task, bundle.model)
    check = _batches(len(labels), task_name, lengths=FAMILY_LENGTHS)[0]
    before = logits(state.params, distributed.global_batch(check, bundle.batch_shardings))

    model.train()
    no_decay = [p for n, p in model.named_parameters() if "norm" in n or n.endswith("bias")]
    decay = [p for n, p in model.named_parameters() if not ("norm" in n or n.endswith("bias"))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-6)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _bert_schedule)
    norms = []
    for step, batch in enumerate(_batches(len(labels), task_name, lengths=FAMILY_LENGTHS)):
        state, metrics = bundle.train_step(
            state, distributed.global_batch(batch, bundle.batch_shardings), jax.random.PRNGKey(0))
        real = _real_rows(batch)
        loss = model(**_torch_inputs(batch, real), **_torch_labels(batch, task_name, real)).loss
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        print(f"{task_name} step {step}: loss {float(metrics['loss']):.6f} / {loss.item():.6f}, "
              f"grad norm {float(metrics['grad_norm']):.5f} / {float(norm):.5f}")
        np.testing.assert_allclose(float(metrics["loss"]), loss.item(), rtol=1e-4,
                                   err_msg=f"step {step}")
        np.testing.assert_allclose(float(metrics["grad_norm"]), float(norm), rtol=1e-3)
        norms.append(float(norm))
    assert max(norms) > 1.0  # clipping was exercised

    real = _real_rows(check)
    ours = logits(state.params, distributed.global_batch(check, bundle.batch_shardings))
    model.eval()
    with torch.no_grad():
        output = model(**_torch_inputs(check, np.ones(len(real), bool)))
    theirs = (np.stack([output.start_logits.numpy(), output.end_logits.numpy()], -1)
              if task_name == "qa" else output.logits.numpy())
    assert np.abs(theirs[real] - before[real]).max() > 1e-2  # training moved the model
    if task_name == "ner":  # padding positions: no loss reads them, and they are not compared
        pad = check["input_mask"][real][..., None] > 0
        ours, theirs = ours[real] * pad, theirs[real] * pad
    else:
        ours, theirs = ours[real], theirs[real]
    # Four updates of size ~lr on logits of size ~1: 2e-4, as the BERT parity test.
    np.testing.assert_allclose(ours, theirs, atol=2e-4, rtol=0)
