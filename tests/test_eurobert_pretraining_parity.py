"""EuroBERT's pre-training step against its recipe in PyTorch: transformers'
`EuroBertForMaskedLM` (50% of tokens masked, MLM only) trained with `torch.optim.AdamW`
(betas 0.9/0.95, eps 1e-5, weight decay 0.1 on all but norms and biases) under the same
warmup-stable-decay schedule with a linear decay, clipping at 1, four steps from the same
random weights, grouped-query attention (tests/eurobert_helpers.py's model).

Bounds, as tests/test_modernbert_pretraining_parity.py's: losses rtol 1e-4 and gradient
norms rtol 1e-3 (float32 both sides, sums in different orders: a loss is a mean of ~70
log-softmax terms of size ~5, rounding ~1e-6 relative, which four AdamW steps carry into the
weights at most as lr x that).
"""

import jax
import numpy as np
import pytest
from eurobert_helpers import HF_CONFIG, hf_model
from test_modernbert_pretraining_parity import BATCH, SEQ_LEN, STEPS, _batches

from bert_jax import sharding
from bert_jax.interop import model_source
from bert_jax.tasks.masked_lm import MaskedLMTask
from bert_jax.training import distributed, finetune, train_step

RATE, PEAK, WARMUP, DECAY = 0.5, 1e-3, 1, 2
BETAS, EPSILON, WEIGHT_DECAY = (0.9, 0.95), 1e-5, 0.1


def _schedule(step: int) -> float:
    """Warm-up over 1 step, the peak, then a linear decay to 0 over the last 2."""
    if step < WARMUP:
        return PEAK * step / WARMUP
    return PEAK * (1.0 - min(max((step - (STEPS - DECAY)) / DECAY, 0.0), 1.0))


def test_pretraining_steps_equal_transformers_with_torch_adamw(tmp_path):
    torch = pytest.importorskip("torch")
    model = hf_model("EuroBertForMaskedLM", tmp_path, seed=3)
    source = model_source.in_directory(str(tmp_path))
    config, params = source.config(), source.load().params
    task = MaskedLMTask(max_seq_len=SEQ_LEN, masked_lm_prob=RATE)
    run_config = finetune.run_config_for(
        config, finetune.Settings(epochs=1, learning_rate=PEAK, batch_size=BATCH,
                                  max_seq_len=SEQ_LEN),
        ["--config.optimizer.name=adamw", f"--config.optimizer.beta2={BETAS[1]}",
         f"--config.optimizer.epsilon={EPSILON}",
         f"--config.optimizer.weight_decay={WEIGHT_DECAY}", "--config.optimizer.schedule=wsd",
         f"--config.optimizer.decay_steps={DECAY}", "--config.optimizer.decay_shape=linear",
         f"--config.finetune.warmup_fraction={WARMUP / STEPS}"])
    finetune.schedule_steps(run_config, BATCH * STEPS)
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
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=PEAK, betas=BETAS, eps=EPSILON)
    norms = []
    for step, batch in enumerate(_batches(task.max_predictions, RATE, HF_CONFIG["vocab_size"])):
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
        np.testing.assert_allclose(float(metrics["learning_rate"]), _schedule(step), rtol=1e-6)
        np.testing.assert_allclose(float(metrics["loss"]), loss.item(), rtol=1e-4,
                                   err_msg=f"step {step}")
        np.testing.assert_allclose(float(metrics["grad_norm"]), float(norm), rtol=1e-3)
        norms.append(float(norm))
    assert max(norms) > 1.0  # clipping was exercised
    # The trained weights agree too: a few updates of ~lr on weights of ~0.1.
    ours = np.asarray(state.params["eurobert"]["layer_1"]["attention"]["key"]["kernel"])
    theirs = model.model.layers[1].self_attn.k_proj.weight.detach().numpy().T.reshape(ours.shape)
    before = np.asarray(params["eurobert"]["layer_1"]["attention"]["key"]["kernel"])
    assert np.abs(ours - before).max() > 1e-4  # moved
    np.testing.assert_allclose(ours, theirs, atol=1e-6)
