"""On an AMX CPU the matrix products run in oneDNN (bert_jax/cpu_matmul.py): when that is chosen,
what a user's own choice overrides, and that every family's forward and backward pass compiles
with oneDNN's products and gives the default library's numbers."""

import io
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from family_configs import CONFIGS, POSITIONS, family_batch
from tolerances import ENCODER_STEPS, assert_close

from bert_jax import cpu_matmul
from bert_jax.errors import UserError
from bert_jax.models.config import Precision
from bert_jax.models.families import family_of

AMX = ["avx2", "avx512f", "amx_tile", "amx_bf16"]
ICE_LAKE = ["avx2", "avx512f", "avx512_vnni"]
JAXLIB = "0.10.2"


@pytest.mark.parametrize("environ, isa, jaxlib, accelerator, command, reason", [
    ({}, AMX, JAXLIB, False, "pretrain", None),
    ({"JAX_PLATFORMS": "cpu"}, AMX, JAXLIB, True, "pretrain", None),  # a GPU machine's CPU
    ({}, ICE_LAKE, JAXLIB, False, "pretrain", "measured faster only on CPUs with AMX"),
    ({}, AMX, JAXLIB, True, "pretrain", "an accelerator runs the steps"),
    ({"JAX_PLATFORMS": "tpu"}, AMX, JAXLIB, False, "pretrain", "an accelerator runs the steps"),
    ({}, AMX, "0.11.0", False, "pretrain", "jaxlib 0.11.0: measured with 0.10.x only"),
    ({"BERT_JAX_CPU_MATMUL": "xla"}, AMX, JAXLIB, False, "pretrain", "BERT_JAX_CPU_MATMUL=xla"),
    ({"XLA_FLAGS": "--xla_cpu_use_onednn=false"}, AMX, JAXLIB, False, "pretrain",
     "XLA_FLAGS chooses"),
    ({"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type=X"}, AMX, JAXLIB, False, "pretrain",
     "XLA_FLAGS chooses"),
    # Flags about other things leave the choice to this module.
    ({"XLA_FLAGS": "--xla_backend_optimization_level=0"}, AMX, JAXLIB, False, "pretrain", None),
    # Short commands keep the compilation cache, which oneDNN's programs cannot enter ...
    ({}, AMX, JAXLIB, False, "finetune",
     "finetune keeps the compilation cache; BERT_JAX_CPU_MATMUL=onednn for oneDNN"),
    ({}, AMX, JAXLIB, False, "embed",
     "embed keeps the compilation cache; BERT_JAX_CPU_MATMUL=onednn for oneDNN"),
    # ... unless the user asks, which also reaches CPUs without AMX,
    ({"BERT_JAX_CPU_MATMUL": "onednn"}, AMX, JAXLIB, False, "finetune", None),
    ({"BERT_JAX_CPU_MATMUL": "onednn"}, ICE_LAKE, JAXLIB, False, "embed", None),
    # but not a jaxlib whose flags differ, nor a process whose steps run on an accelerator.
    ({"BERT_JAX_CPU_MATMUL": "onednn"}, AMX, "0.11.0", False, "finetune",
     "jaxlib 0.11.0: measured with 0.10.x only"),
    ({"BERT_JAX_CPU_MATMUL": "onednn"}, AMX, JAXLIB, True, "finetune",
     "an accelerator runs the steps"),
])
def test_onednn_runs_the_products_only_where_it_was_measured_and_nothing_else_chose(
        environ, isa, jaxlib, accelerator, command, reason):
    assert cpu_matmul.reason_to_leave_alone(environ, isa, jaxlib, accelerator,
                                            command) == reason


def test_an_unknown_choice_is_an_error_naming_the_variable_and_the_choices():
    with pytest.raises(UserError, match=r"BERT_JAX_CPU_MATMUL=onedn: expected one of xla, "
                                        r"onednn"):
        cpu_matmul.reason_to_leave_alone({"BERT_JAX_CPU_MATMUL": "onedn"}, AMX, JAXLIB, False,
                                         "pretrain")


def _on_an_amx_cpu(monkeypatch):
    monkeypatch.setattr(cpu_matmul, "_reason", lambda environ, command: (
        cpu_matmul.reason_to_leave_alone(environ, AMX, JAXLIB, False, command)))


def test_choose_adds_the_flags_once_and_says_so_once(monkeypatch):
    _on_an_amx_cpu(monkeypatch)
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))  # choose adds one
    environ, said = {"XLA_FLAGS": "--xla_backend_optimization_level=0"}, io.StringIO()
    cpu_matmul.choose("pretrain", environ, said)
    assert environ["XLA_FLAGS"] == (f"--xla_backend_optimization_level=0 "
                                    f"{cpu_matmul.ONEDNN_FLAGS}")
    assert said.getvalue() == cpu_matmul.ANNOUNCEMENT + "\n"
    assert all(words in said.getvalue() for words in (
        "oneDNN", "compilation cache", "BERT_JAX_CPU_MATMUL=xla"))
    # The process re-executed with them (cpu_memory's relaunch) neither adds nor says more.
    again = io.StringIO()
    cpu_matmul.choose("pretrain", environ, again)
    assert environ["XLA_FLAGS"].count("xla_cpu_use_onednn") == 1 and not again.getvalue()
    assert cpu_matmul.state("pretrain", environ).startswith("matmul: oneDNN")
    untouched = {"BERT_JAX_CPU_MATMUL": "xla"}
    cpu_matmul.choose("pretrain", untouched, again)
    assert untouched == {"BERT_JAX_CPU_MATMUL": "xla"} and not again.getvalue()
    assert (cpu_matmul.state("pretrain", untouched)
            == "matmul: XLA's default (BERT_JAX_CPU_MATMUL=xla)")
    short = {}
    cpu_matmul.choose("embed", short, again)
    assert short == {} and not again.getvalue()
    assert cpu_matmul.state("embed", short).startswith(
        "matmul: XLA's default (embed keeps the compilation cache")


def test_the_cache_warning_of_onednn_programs_is_said_once_by_the_announcement(monkeypatch):
    """JAX warns for each program it cannot write to the persistent cache; where oneDNN runs
    the products that is every step, which the announcement has said. Other cache warnings
    still reach the user."""
    _on_an_amx_cpu(monkeypatch)
    onednn = ("Error writing persistent compilation cache entry for 'jit_train_step': "
              "JaxRuntimeError: UNIMPLEMENTED: ToProto is not implemented for thunk kind: "
              "onednn-fusion")
    other = ("Error writing persistent compilation cache entry for 'jit_train_step': "
             "OSError: [Errno 28] No space left on device")
    for chosen in ({}, {"XLA_FLAGS": cpu_matmul.ONEDNN_FLAGS}):  # chosen here, or relaunched
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cpu_matmul.choose("pretrain", chosen, io.StringIO())
            warnings.warn(onednn, UserWarning)
            warnings.warn(other, UserWarning)
        assert [str(warning.message) for warning in caught] == [other]
    with warnings.catch_warnings(record=True) as caught:  # XLA's default: nothing to hide
        warnings.simplefilter("always")
        cpu_matmul.choose("embed", {}, io.StringIO())
        warnings.warn(onednn, UserWarning)
    assert len(caught) == 1


def _compiled(function, options, *arguments):
    return jax.jit(function).lower(*arguments).compile(compiler_options=options)


def test_chained_and_summed_products_compile_with_onednn_one_at_a_time():
    """jaxlib 0.10.2's graph form of oneDNN fails on a product that feeds another and on two
    products added ("partition compile failed"): the gradient of a weight used twice has both.
    One at a time, they compile, run in oneDNN, and give the default library's numbers."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 32)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((32, 32)) / 8, jnp.float32)
    gradient = jax.grad(lambda x, w: jnp.sum(((x @ w) @ w) ** 2), argnums=(0, 1))
    onednn = _compiled(gradient, cpu_matmul.ONEDNN_OPTIONS, x, w)
    default = _compiled(gradient, cpu_matmul.XLA_DEFAULT_OPTIONS, x, w)
    assert "onednn_fusion" in onednn.as_text() and "onednn_fusion" not in default.as_text()
    # Each gradient is two chained products of 32-term sums of terms up to the largest |x w|:
    # either library's blocking rounds each sum a few times; 64 steps of each output's scale.
    for actual, expected in zip(onednn(x, w), default(x, w)):
        assert_close(actual, expected, ENCODER_STEPS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_familys_masked_lm_gradients_are_the_same_with_onednn_products(name):
    config = CONFIGS[name]
    ids, segments, mask = family_batch(1)
    positions = jnp.asarray(POSITIONS)
    model = family_of(config).masked_lm_model(config, Precision())
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), ids, segments, mask, positions))

    def loss(params):
        logits = model.apply(params, ids, segments, mask, positions, True)
        return jnp.mean(jax.nn.log_softmax(logits) ** 2), logits

    step = jax.value_and_grad(loss, has_aux=True)
    onednn = _compiled(step, cpu_matmul.ONEDNN_OPTIONS, params)
    assert "onednn_fusion" in onednn.as_text()
    (actual_loss, actual_logits), actual_grads = onednn(params)
    (expected_loss, expected_logits), expected_grads = _compiled(
        step, cpu_matmul.XLA_DEFAULT_OPTIONS, params)(params)
    # The encoder's bound (tolerances.ENCODER_STEPS): another kernel's order of summation.
    assert_close(actual_logits, expected_logits, ENCODER_STEPS, err_msg="logits")
    assert_close(actual_loss, expected_loss, ENCODER_STEPS, err_msg="loss")
    scale = max(float(np.abs(leaf).max()) for leaf in jax.tree.leaves(expected_grads))
    for (path, actual), expected in zip(jax.tree_util.tree_leaves_with_path(actual_grads),
                                        jax.tree.leaves(expected_grads)):
        assert_close(actual, expected, ENCODER_STEPS, scale, err_msg=jax.tree_util.keystr(path))
