"""ModernBERT's pre-training step against its reference recipe in PyTorch: transformers'
`ModernBertForMaskedLM` (30% of tokens masked, MLM only, no NSP) trained with torch-optimi's
`StableAdamW` (decoupled weight decay, no decay on norms and biases) under the same
warmup-stable-decay schedule with a 1-sqrt decay, clipping at 1, four steps from the same
random weights.

Bounds, as the fine-tuning parity tests': losses rtol 1e-4 and gradient norms rtol 1e-3.
Both sides compute in float32 with sums in different orders; a loss is a mean of ~40
log-softmax terms of size ~5, so its rounding is ~1e-6 relative, and four StableAdamW steps
(whose first updates are about lr x sign(g)) carry a gradient's rounding into the weights at
most as lr x its relative rounding: far below 1e-4 of the loss.
"""

import jax
import numpy as np
import pytest
from modernbert_helpers import HF_CONFIG, hf_model

from bert_jax import sharding
from bert_jax.interop import model_source
from bert_jax.tasks.masked_lm import MaskedLMTask
from bert_jax.training import distributed, finetune, train_step

BATCH, SEQ_LEN, STEPS, RATE = 8, 24, 4, 0.3
PEAK, WARMUP, DECAY, WEIGHT_DECAY = 1e-3, 1, 2, 1e-3
MASK_ID = 3  # any id the batch does not otherwise use as a token


def _schedule(step: int) -> float:
    """Warm-up over 1 step, the peak, then 1 - sqrt of the decay done over the last 2."""
    if step < WARMUP:
        return PEAK * step / WARMUP
    done = min(max((step - (STEPS - DECAY)) / DECAY, 0.0), 1.0)
    return PEAK * (1.0 - done ** 0.5)


def _batches(max_predictions: int, rate: float = RATE,
             vocab_size: int = HF_CONFIG["vocab_size"]):
    """STEPS batches of padded rows, `rate` of each row's real tokens masked (80/10/10)."""
    rng = np.random.default_rng(7)
    batches = []
    for _ in range(STEPS):
        lengths = rng.integers(8, SEQ_LEN + 1, BATCH)
        mask = (np.arange(SEQ_LEN)[None] < lengths[:, None]).astype(np.int32)
        original = (rng.integers(5, vocab_size, (BATCH, SEQ_LEN)) * mask)
        original = original.astype(np.int32)
        ids = original.copy()
        positions = np.zeros((BATCH, max_predictions), np.int32)
        weights = np.zeros((BATCH, max_predictions), np.float32)
        for row, length in enumerate(lengths):
            chosen = np.sort(rng.choice(np.arange(1, length - 1),
                                        min(max_predictions, round(rate * length)),
                                        replace=False))
            positions[row, :len(chosen)], weights[row, :len(chosen)] = chosen, 1.0
            for position in chosen:
                draw = rng.uniform()
                ids[row, position] = (MASK_ID if draw < 0.8 else
                                      rng.integers(5, vocab_size) if draw < 0.9
                                      else original[row, position])
        batches.append(dict(
            input_ids=ids, segment_ids=np.zeros_like(ids), input_mask=mask, instance_ids=mask,
            position_ids=np.tile(np.arange(SEQ_LEN, dtype=np.int32), (BATCH, 1)),
            masked_lm_positions=positions,
            masked_lm_ids=np.take_along_axis(original, positions, axis=1) * (weights > 0),
            masked_lm_weights=weights))
    return batches


# optimi warns that 1e-3 is a large fully decoupled decay: chosen so four steps show it.
@pytest.mark.filterwarnings("ignore:You are using weight_decay")
def test_pretraining_steps_equal_transformers_with_torch_optimi_stable_adamw(tmp_path):
    torch = pytest.importorskip("torch")
    optimi = pytest.importorskip("optimi", reason="torch-optimi is StableAdamW's reference")
    model = hf_model("ModernBertForMaskedLM", tmp_path, seed=3)
    source = model_source.in_directory(str(tmp_path))
    config, params = source.config(), source.load().params
    task = MaskedLMTask(max_seq_len=SEQ_LEN, masked_lm_prob=RATE)
    run_config = finetune.run_config_for(
        config, finetune.Settings(epochs=1, learning_rate=PEAK, batch_size=BATCH,
                                  max_seq_len=SEQ_LEN),
        ["--config.optimizer.name=stable_adamw", "--config.optimizer.beta2=0.98",
         f"--config.optimizer.weight_decay={WEIGHT_DECAY}",
         "--config.optimizer.decouple_learning_rate=true", "--config.optimizer.schedule=wsd",
         f"--config.optimizer.decay_steps={DECAY}", "--config.optimizer.decay_shape=1-sqrt",
         f"--config.finetune.warmup_fraction={WARMUP / STEPS}"])
    finetune.schedule_steps(run_config, BATCH * STEPS)
    assert run_config.num_train_steps == STEPS and run_config.optimizer.warmup_steps == WARMUP
    bundle = train_step.build_train_step(run_config, sharding.mesh_from_config(run_config.mesh),
                                         task=task)
    state = bundle.init_state(jax.random.PRNGKey(0))
    state = state.replace(params=jax.tree.map(
        lambda value, target: jax.device_put(np.asarray(value, np.float32), target.sharding),
        params, state.params))

    model.train()
    named = list(model.named_parameters())
    no_decay = [p for n, p in named if "norm" in n or n.endswith("bias")]
    decay = [p for n, p in named if not ("norm" in n or n.endswith("bias"))]
    optimizer = optimi.StableAdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay,
                                                           "weight_decay": 0.0}],
        lr=PEAK, betas=(0.9, 0.98), eps=1e-6, decouple_lr=True, max_lr=PEAK, foreach=False,
        triton=False)
    norms = []
    for step, batch in enumerate(_batches(task.max_predictions)):
        state, metrics = bundle.train_step(
            state, distributed.global_batch(batch, bundle.batch_shardings), jax.random.PRNGKey(0))
        labels = np.full(batch["input_ids"].shape, -100, np.int64)
        for row in range(BATCH):
            real = batch["masked_lm_weights"][row] > 0
            labels[row, batch["masked_lm_positions"][row][real]] = (
                batch["masked_lm_ids"][row][real])
        loss = model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                     attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                     labels=torch.tensor(labels)).loss
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in optimizer.param_groups:
            group["lr"] = _schedule(step)
        optimizer.step()
        print(f"step {step}: loss {float(metrics['loss']):.6f} / {loss.item():.6f}, grad norm "
              f"{float(metrics['grad_norm']):.5f} / {float(norm):.5f}, "
              f"lr {float(metrics['learning_rate']):.2e} / {_schedule(step):.2e}")
        assert "nsp_loss" not in metrics
        np.testing.assert_allclose(float(metrics["learning_rate"]), _schedule(step), rtol=1e-6)
        np.testing.assert_allclose(float(metrics["loss"]), loss.item(), rtol=1e-4,
                                   err_msg=f"step {step}")
        np.testing.assert_allclose(float(metrics["grad_norm"]), float(norm), rtol=1e-3)
        norms.append(float(norm))
    assert max(norms) > 1.0  # clipping was exercised
    # The trained weights agree too: a few updates of ~lr on weights of ~0.1-1.
    ours = np.asarray(state.params["modernbert"]["layer_1"]["mlp"]["input"]["kernel"])
    theirs = model.model.layers[1].mlp.Wi.weight.detach().numpy().T.reshape(ours.shape)
    assert np.abs(ours - np.asarray(params["modernbert"]["layer_1"]["mlp"]["input"]["kernel"])
                  ).max() > 1e-4  # moved
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_continued_pretraining_from_a_transformers_directory_exports_what_it_trained(tmp_path):
    """`pretrain --config modernbert_demo --config.init_from=HF_DIR` on MLM-only shards made
    with the directory's own tokenizer.json starts from its weights, its pre-trained head
    included, and `convert --to hf` gives a ModernBertForMaskedLM whose logits are
    bert-jax's. The demo's data.demo_dir is left set: with data.train_files given, the demo
    corpus is not built (it was, and its tokenizer refused, before issue 48)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from modernbert_helpers import modernbert_directory
    from pipeline_helpers import mlm_shards

    from bert_jax.cli import main
    from bert_jax.models.families import family_of

    _, directory = modernbert_directory(tmp_path / "hf", max_position_embeddings=64)
    corpus = tmp_path / "corpus.txt"
    sentences = ["The quick brown fox jumps over the lazy dog.",
                 "Paris is the capital of France, and Berlin is the capital of Germany."]
    corpus.write_text("".join(f"{sentences[d % 2]} {sentences[(d + 1) % 2]}\n\n"
                              for d in range(40)), encoding="utf-8")
    shards = mlm_shards(tmp_path, "shards", str(corpus), directory, seq_len=32)
    workdir = tmp_path / "run"
    assert main(["pretrain", "--config", "modernbert_demo", "--workdir", str(workdir),
                 f"--config.init_from={directory}",
                 f"--config.data.train_files={shards}", "--config.data.seq_len=32",
                 "--config.num_train_steps=2", "--config.batch_size=8",
                 "--config.optimizer.warmup_steps=1", "--config.optimizer.decay_steps=1",
                 "--config.checkpoint.every_steps=2", "--no-progress"]) == 0
    exported = tmp_path / "exported"
    assert main(["convert", str(workdir), str(exported), "--to", "hf"]) == 0
    model, info = transformers.ModernBertForMaskedLM.from_pretrained(
        str(exported), output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    source = model_source.in_directory(str(workdir))
    config, params = source.config(), source.load().params
    original = model_source.in_directory(directory).load().params
    assert np.abs(params["head"]["dense"]["kernel"]
                  - original["head"]["dense"]["kernel"]).max() > 0  # trained, from the source
    ids = np.array([[604, 40, 41, 42, 43, 605]], np.int32)  # [CLS] ... [SEP] of the fixture
    positions = np.arange(6, dtype=np.int32)[None]
    ours = family_of(config).masked_lm_model(config).apply(
        {"params": params}, ids, np.zeros_like(ids), np.ones_like(ids), positions)
    with torch.no_grad():
        theirs = model.eval()(input_ids=torch.tensor(ids, dtype=torch.long)).logits.numpy()
    # The same weights, two frameworks: 5e-5 as tests/test_modernbert.py's bound.
    assert np.abs(np.asarray(ours) - theirs).max() < 5e-5
