"""Fine-tuning's whole train step (loss, gradients, clipping, AdamW, schedule) against PyTorch.

Several optimizer steps of `finetune classify` / `regress` / `ner` / `qa` on made-up batches,
dropout off, from the same weights, must give the losses and parameters of Hugging Face's
`BertForSequenceClassification` / `BertForTokenClassification` /
`BertForQuestionAnswering` trained with
`torch.optim.AdamW` and the same recipe (decay on all but LayerNorm parameters and biases,
clipping at 1, BERT's warm-up/decay schedule). Filler rows (weight 0, as a last partial batch
has) must count for nothing: PyTorch sees only the real rows. For `ner` the pieces that carry
no label (later pieces of a word, padding) are -100 for PyTorch, as HF's token-classification
example marks them. For `qa` the real rows fill their batch's length: our span loss leaves
padding positions out of the softmax, HF's does not, so only unpadded windows (most of a
SQuAD run's) are the same problem on both sides. Batches change length from step to step, as
fine-tuning's length buckets do.
"""

import jax
import numpy as np
import pytest
from interop_helpers import random_pretraining_params, torch_inputs, write_vocab
from squad_v2_windows import DOC_STRIDE, expected_targets, squad_v2_batches, v2_examples

from bert_jax import sharding
from bert_jax.interop import model_writers
from bert_jax.models.presets import preset
from bert_jax.training import distributed, finetune, train_step
from input_pipeline.tokenization import load_tokenizer

CONFIG = preset("tiny", vocab_size=37, hidden_dim=32, num_layers=2, num_heads=2, mlp_dim=64,
                max_positions=32)
BATCH, STEPS, WARMUP, LEARNING_RATE = 8, 4, 1, 1e-3
# Training compounds float32 differences: each step's loss and gradients differ by a
# forward and backward pass's (tolerances.ENCODER_STEPS each), and AdamW divides each
# gradient by the root of its second moment, so an entry near zero that the two sides round
# a step apart moves its parameter by up to the learning rate in another direction: STEPS
# updates may part a parameter by up to STEPS x LEARNING_RATE (4e-3). The bounds take 1/20
# of that for the logits, 1/40 for the loss's relative difference and 1e-3 for the
# gradient norm's; measured here (5 tasks, 4 steps): logits 1.8e-5 apart (qa, logits up to
# 2.8), losses 1.6e-6 relative, gradient norms 1.8e-6 relative.
TRAINING_DRIFT = STEPS * LEARNING_RATE / 20  # 2e-4: 1/20 of the moves the updates allow


BUCKET_LENGTHS = (16, 8, 16, 12)  # a step's batch length, as fine-tuning's buckets change it


def _batches(num_labels: int, task_name: str, tokenizer=None, directory=None,
             lengths=BUCKET_LENGTHS):
    """STEPS batches of BATCH rows, the last two rows of each filler (weight 0), step i's
    `lengths[i]` tokens long."""
    if task_name == "qa_v2":
        return squad_v2_batches(tokenizer, directory, BATCH, STEPS)
    rng = np.random.default_rng(3)
    batches = []
    for step in range(STEPS):
        seq_len = lengths[step]
        lengths = (np.full(BATCH, seq_len) if task_name == "qa"
                   else rng.integers(3, seq_len + 1, BATCH))
        mask = (np.arange(seq_len)[None] < lengths[:, None]).astype(np.int32)
        weights = np.ones(BATCH, np.float32)
        weights[-2:] = 0
        mask[-2:] = 0
        mask[-2:, 0] = 1  # as batching.BucketedBatches fills a partial batch
        batch = dict(input_ids=(rng.integers(5, 37, (BATCH, seq_len)) * mask).astype(np.int32),
                     segment_ids=((np.arange(seq_len)[None] >= lengths[:, None] // 2) * mask
                                  ).astype(np.int32),
                     input_mask=mask)
        if task_name == "ner":
            # About a third of the real pieces are a word's later pieces: no label.
            labelled = (mask * (rng.uniform(size=mask.shape) < 0.65) * (weights[:, None] > 0))
            batch.update(labels=(rng.integers(0, num_labels, mask.shape) * labelled
                                 ).astype(np.int32),
                         label_weights=labelled.astype(np.int32),
                         # Each row's own count, as evaluation has: HF's mean over the batch.
                         token_loss_count=labelled.sum(axis=1).astype(np.float32))
        elif task_name == "qa":  # a span's ends anywhere, [CLS] (0) among them
            start = rng.integers(0, seq_len, BATCH)
            end = np.minimum(start + rng.integers(0, 4, BATCH), seq_len - 1)
            batch.update(start_positions=(start * (weights > 0)).astype(np.int32),
                         end_positions=(end * (weights > 0)).astype(np.int32), weights=weights)
        else:
            labels = (rng.uniform(0, 5, BATCH).astype(np.float32) if task_name == "regress"
                      else rng.integers(0, num_labels, BATCH).astype(np.int32))
            batch.update(labels=labels * (weights > 0), weights=weights)
        batches.append(batch)
    return batches


def _real_rows(batch: dict) -> np.ndarray:
    """The rows PyTorch sees: all but the filler rows."""
    if "weights" in batch:
        return batch["weights"] > 0
    return np.arange(len(batch["input_ids"])) < BATCH - 2


def _torch_labels(batch: dict, task_name: str, real: np.ndarray) -> dict:
    import torch

    if task_name in ("qa", "qa_v2"):
        return {name: torch.tensor(batch[name][real], dtype=torch.long)
                for name in ("start_positions", "end_positions")}
    return dict(labels=_torch_label_tensor(batch, task_name, real))


def _torch_label_tensor(batch: dict, task_name: str, real: np.ndarray):
    import torch

    if task_name == "ner":
        return torch.tensor(np.where(batch["label_weights"] > 0, batch["labels"], -100)[real],
                            dtype=torch.long)
    target = torch.tensor(batch["labels"][real])
    return target if task_name == "regress" else target.long()


def _bert_schedule(step: int) -> float:
    """The original BERT schedule as a multiplier: warm-up, then decay counted from step 0."""
    return step / WARMUP if step < WARMUP else max(0.0, 1.0 - step / STEPS)


@pytest.mark.parametrize("task_name, labels", [("classify", ["a", "b", "c"]),
                                               ("regress", ["LABEL_0"]),
                                               ("ner", ["O", "B-PER", "I-PER", "B-LOC"]),
                                               ("qa", ["start", "end"]),
                                               ("qa_v2", ["start", "end"])])
def test_fine_tuning_steps_equal_pytorch_adamw_on_hf_model(tmp_path, task_name, labels):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bert_jax.tasks.classification import ClassificationTask
    from bert_jax.tasks.question_answering import QuestionAnsweringTask
    from bert_jax.tasks.regression import RegressionTask
    from bert_jax.tasks.token_classification import NerSettings, TokenClassificationTask
    from input_pipeline.tasks.columns import ColumnSpec

    if task_name == "ner":
        task = TokenClassificationTask(NerSettings(tuple(labels)))
        auto_model = transformers.AutoModelForTokenClassification
    elif task_name in ("qa", "qa_v2"):
        task = QuestionAnsweringTask()
        auto_model = transformers.AutoModelForQuestionAnswering
    else:
        task_class = RegressionTask if task_name == "regress" else ClassificationTask
        task = task_class(labels, ColumnSpec((), "label"))
        auto_model = transformers.AutoModelForSequenceClassification
    tokenizer = load_tokenizer(write_vocab(tmp_path))
    rng = np.random.default_rng(1)
    params = {"bert": random_pretraining_params(CONFIG, 1)["bert"]}
    if task_name != "classify" and task_name != "regress":  # BertFor{Token Classification,
        # Question Answering}: no pooler
        params["bert"] = {name: value for name, value in params["bert"].items()
                          if name != "pooler"}
    params["qa_outputs" if task_name.startswith("qa") else "classifier"] = {
        "kernel": rng.normal(0, 0.3, (CONFIG.hidden_dim, len(labels))).astype(np.float32),
        "bias": rng.normal(0, 0.3, (len(labels),)).astype(np.float32)}

    run_config = finetune.run_config_for(
        CONFIG, finetune.Settings(epochs=1, learning_rate=LEARNING_RATE, batch_size=BATCH,
                                  max_seq_len=16),
        ["--config.model.dropout_rate=0.0", "--config.model.attention_dropout_rate=0.0",
         f"--config.finetune.warmup_fraction={WARMUP / STEPS}"])
    finetune.schedule_steps(run_config, BATCH * STEPS)
    assert run_config.num_train_steps == STEPS and run_config.optimizer.warmup_steps == WARMUP
    mesh = sharding.mesh_from_config(run_config.mesh)
    bundle = train_step.build_train_step(run_config, mesh, task=task)
    state = bundle.init_state(jax.random.PRNGKey(0))
    state = state.replace(params=jax.tree.map(
        lambda value, target: jax.device_put(np.asarray(value, np.float32), target.sharding),
        params, state.params))
    logits = logits_function(task, bundle.model)
    check = distributed.global_batch(_batches(len(labels), task_name, tokenizer, tmp_path)[0],
                                     bundle.batch_shardings)
    before = logits(state.params, check)  # before training donates the state's buffers

    exported = str(tmp_path / "hf")
    model_writers.export_huggingface(CONFIG, params, tokenizer, exported, head=task.head())
    model = auto_model.from_pretrained(
        exported, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model.train()
    no_decay = [p for n, p in model.named_parameters() if "LayerNorm" in n or n.endswith("bias")]
    decay = [p for n, p in model.named_parameters()
             if not ("LayerNorm" in n or n.endswith("bias"))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-6)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _bert_schedule)

    rng_key, norms = jax.random.PRNGKey(0), []
    for step, batch in enumerate(_batches(len(labels), task_name, tokenizer, tmp_path)):
        state, metrics = bundle.train_step(
            state, distributed.global_batch(batch, bundle.batch_shardings), rng_key)
        real = _real_rows(batch)
        loss = model(**torch_inputs({name: value[real] for name, value in batch.items()}),
                     **_torch_labels(batch, task_name, real)).loss
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        assert float(metrics["finite"]) == 1.0
        # See TRAINING_DRIFT: the loss to half of it relative, the gradient norm to 1e-3.
        np.testing.assert_allclose(float(metrics["loss"]), loss.item(),
                                   rtol=TRAINING_DRIFT / 2, err_msg=f"step {step}")
        np.testing.assert_allclose(float(metrics["grad_norm"]), float(norm), rtol=1e-3)
        norms.append(float(norm))

    assert max(norms) > 1.0  # clipping was exercised

    # The trained models agree: the same logits on fresh inputs.
    check = _batches(len(labels), task_name, tokenizer, tmp_path)[0]
    ours = logits(state.params, distributed.global_batch(check, bundle.batch_shardings))
    model.eval()
    with torch.no_grad():
        output = model(**torch_inputs(check))
    theirs = (np.stack([output.start_logits.numpy(), output.end_logits.numpy()], -1)
              if task_name.startswith("qa") else output.logits.numpy())
    real = _real_rows(check)
    moved = np.abs(theirs[real] - before[real]).max()
    assert moved > 1e-2  # training changed the model, so agreement below means something
    np.testing.assert_allclose(ours[real], theirs[real], atol=TRAINING_DRIFT, rtol=0)



def _logits(outputs) -> np.ndarray:
    """A head's logits as one array: QA's (start, end) pair stacked on a last axis."""
    if isinstance(outputs, tuple):
        return np.stack([np.asarray(part) for part in outputs], -1)
    return np.asarray(outputs)


def logits_function(task, model):
    """`(params, batch) -> logits` of `task`'s head without dropout, compiled: one compile
    instead of the model's operations run one by one, each compiled on first use (5-10 s a
    test at -O0)."""
    apply = jax.jit(lambda params, batch: task.apply(model, params, batch, False))
    return lambda params, batch: _logits(apply(params, batch))


def test_v2_windows_point_unanswerable_and_answerless_windows_at_cls(tmp_path):
    """The targets the v2.0 parity case trains on, against the original's rule."""
    tokenizer = load_tokenizer(write_vocab(tmp_path))
    examples, answers = v2_examples(tokenizer, tmp_path)
    windows, seen = examples.gold.windows, {"cls_impossible": 0, "cls_answerless": 0, "span": 0}
    for number, answer in enumerate(answers):
        rows = np.flatnonzero(windows.question_index == number)
        targets = expected_targets([DOC_STRIDE * index for index in range(len(rows))], answer)
        got = list(zip(windows.start_positions[rows].tolist(),
                       windows.end_positions[rows].tolist()))
        assert got == targets, f"question {number}"
        for target in targets:
            seen["span" if target != (0, 0) else
                 "cls_impossible" if answer is None else "cls_answerless"] += 1
        assert windows.input_mask[rows].all()  # full windows: no padding in either softmax
    assert min(seen.values()) >= 3, seen  # every kind of target is trained on
