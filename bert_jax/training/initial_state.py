"""Where a run's starting state comes from: resume, the weights of a model, or the seed.

In this order:
  1. resume: the work directory has a checkpoint -> parameters, optimizer state, step, RNG
     and data position are restored, so the run continues bit-identically (with its seed);
     from the newest intact checkpoint, a damaged newer one named and set aside;
  2. `init_weights`: a model's parameters (continued pre-training, fine-tuning), loaded by
     the caller, who resolved the model -> those parameters, a fresh optimizer at step 0;
  3. from scratch: parameters drawn from `seed`.
"""

import dataclasses
from typing import Callable

import jax
import numpy as np

from bert_jax.errors import UserError
from bert_jax.models.config import BertConfig
from bert_jax.models.families import family_of
from bert_jax.run_config.init_from import architecture_fields
from bert_jax.training import train_step as train_step_lib


@dataclasses.dataclass(frozen=True)
class LoadedWeights:
    """A model's weights as `trainer.train(init_weights=...)` takes them (any object with
    these three attributes will do)."""
    name: str  # where they came from, for the log line "initialised from NAME"
    config: BertConfig  # the model's architecture, checked against the run's
    params: dict  # nested numpy dicts: `bert`, and `mlm_head` / `nsp_head` / a task's head


def seed_key(seed: int) -> list[int]:
    """The raw key data of PRNGKey(seed), as checkpoints record it."""
    return [int(x) for x in jax.random.key_data(jax.random.PRNGKey(seed)).reshape(-1)]


def _check_seed(meta: dict, seed: int, directory, step: int) -> None:
    """A resumed run must keep its seed: dropout keys and the data order derive from it."""
    saved = meta.get("seed")
    if (saved is not None and saved != seed) or meta.get("rng", seed_key(seed)) != seed_key(seed):
        was = f"seed {saved}" if saved is not None else f"another seed (key {meta['rng']})"
        raise UserError(f"{directory}/{step}: this run was trained with {was}, not --config.seed "
                        f"{seed}; resuming with another seed would silently change its dropout "
                        "and data order. Use the original seed, or another --workdir")


def load_init_weights(init_weights: Callable | None, init_from: str, model_config: BertConfig):
    """The weights `init_weights()` gives, refused if their sizes differ from the run's; None
    without them. Called once, before anything is written, and only for a fresh start."""
    if init_weights is None:
        if init_from:
            raise ValueError(f"run_config.init_from is {init_from!r} but no init_weights were "
                             "given: the caller loads the model it names")
        return None
    weights = init_weights()
    if type(weights.config) is not type(model_config):
        raise UserError(f"init_from {weights.name}: it is a {family_of(weights.config).name} "
                        f"model, the run's model is {family_of(model_config).name}")
    for key in architecture_fields(model_config):
        if getattr(weights.config, key) != getattr(model_config, key):
            raise UserError(f"init_from {weights.name}: its {key} is "
                            f"{getattr(weights.config, key)} but the run's model.{key} is "
                            f"{getattr(model_config, key)}")
    return weights


def initial_state(bundle, checkpoints, seed: int, log, weights=None):
    """(state, meta or None): resume > `weights` (`load_init_weights`'s) > from `seed`.

    Checkpoints and weights are per layer; the state comes back as the step keeps it
    (`bundle.layer_storage`)."""
    storage = bundle.layer_storage
    if checkpoints.latest_step() is not None:
        abstract = storage.abstract_state
        step, (params, opt_state, meta) = checkpoints.restore_newest_intact(
            abstract.params, abstract.opt_state, log)
        _check_seed(meta, seed, checkpoints.directory, step)
        log(f"resuming from step {step} in {checkpoints.directory}")
        state = train_step_lib.TrainState(
            step=jax.device_put(np.int32(step), bundle.state_shardings.step),
            params=params, opt_state=opt_state)
        return storage.stored(state), meta
    state = bundle.init_state(jax.random.PRNGKey(seed))
    if weights is not None:
        state = storage.stored(place_weights(weights.name, weights.params,
                                             storage.per_layer(state), log,
                                             getattr(bundle.task, "head_names", {})))
    return state, None


def place_weights(name: str, params: dict, state, log, head_names=None):
    """`state` with a model's parameters in place of the random ones; `head_names` says
    what the task calls a fresh parameter group (regress: its one-output `classifier` is a
    regression head)."""
    merged = _merge_params(state.params, params)
    placed = jax.tree.map(lambda value, target: jax.device_put(value.astype(target.dtype),
                                                               target.sharding),
                          merged, state.params)
    names = head_names or {}
    missing = sorted(names.get(group, group) for group in set(state.params) - set(params))
    log(f"initialised from {name}" + (f" (fresh {', '.join(missing)})" if missing else ""))
    return state.replace(params=placed)


def _merge_params(initial, loaded):
    """`loaded` wherever it has a value of the same shape (an encoder-only source keeps fresh
    heads; a classifier for other labels is replaced by a fresh one)."""
    if not isinstance(initial, dict):
        fits = loaded is not None and np.shape(loaded) == tuple(initial.shape)
        return np.asarray(loaded) if fits else np.asarray(initial)
    return {key: _merge_params(value, (loaded or {}).get(key)) for key, value in initial.items()}
