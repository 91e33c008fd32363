"""The layers both encoder families build from: initialisers with logical axis names, the
dense layer (on a CPU, its kernel's gradient taken in the order XLA runs without a transposed
copy), LayerNorm with float32 statistics, the bias add whose gradient sums in float32, GELU
(and the bias add and activation as one step that keeps only the matmul's output for the
backward pass), several projections of one input as one product (opt-in), and the batch-only
layout of gathered rows."""

import functools
import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import Precision
from bert_jax.models.layers.platform import traced_platform

Array = jax.Array

FLOAT32 = Precision()


def initializer(std: float, *axes: str, cutoff: float = 2.0):
    """Truncated-normal initialiser with standard deviation `std`, cut at `cutoff` std (2 in
    both families' reference code), annotated with logical axes."""
    return nn.with_logical_partitioning(
        nn.initializers.truncated_normal(std, lower=-cutoff, upper=cutoff), axes)


def zeros(*axes: str):
    return nn.with_logical_partitioning(nn.initializers.zeros_init(), axes)


def ones(*axes: str):
    return nn.with_logical_partitioning(nn.initializers.ones_init(), axes)


def gelu(x: Array) -> Array:
    """The exact (erf) GELU of the original BERT, of ModernBERT and of Hugging Face's `gelu`."""
    return jax.nn.gelu(x, approximate=False)


def layer_norm(config, precision: Precision, name: str | None = None, use_bias: bool = True
               ) -> nn.LayerNorm:
    """LayerNorm (epsilon `config.layer_norm_eps`, a bias unless `use_bias` is False) with
    float32 statistics (flax's `force_float32_reductions`), returned in the compute dtype:
    in bf16 the residual stream between layers is bf16, half the bytes of every elementwise
    pass over it."""
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps, dtype=precision.dtype, param_dtype=precision.param_dtype,
        use_bias=use_bias, scale_init=ones("embed"), bias_init=zeros("embed"), name=name)


@jax.custom_vjp
def add_bias(x: Array, bias: Array) -> Array:
    """x + bias in x's dtype, the bias's gradient summed in float32: a bf16 sum over the
    B x T rows of a batch loses the gradient's low digits (XLA need not widen it)."""
    return x + bias.astype(x.dtype)


def _add_bias_forward(x, bias):
    return add_bias(x, bias), bias


def _add_bias_backward(bias, gradient):
    return gradient, _bias_sum(gradient, bias)


add_bias.defvjp(_add_bias_forward, _add_bias_backward)


# On a CPU, a bias wider than this many entries gets its gradient as a product with a vector
# of ones rather than a sum. XLA hands a CPU sum over rows to YNNPACK, whose column sums fall
# off a cliff past 16,384 columns (bench/vocabulary_head.py, Intel Xeon Ice Lake, 616 rows:
# 8.6 ms at 16,384 columns, 164 ms at 24,576, 609 ms at ModernBERT's 50,368-word vocabulary,
# where the product takes 9.2 ms); the masked-LM decoder's bias is the one bias that wide.
# Narrower biases keep the sum, which YNNPACK adds pairwise: a product accumulates its rows
# in one running sum, 5-15x the rounding error there (still within float32's bound for the
# sum, tests/test_bias_gradient.py). Other platforms' reductions have no such cliff.
WIDE_BIAS = 16384


def _bias_sum(gradient: Array, bias: Array) -> Array:
    rows = tuple(range(gradient.ndim - bias.ndim))
    if bias.size > WIDE_BIAS and traced_platform() == "cpu":
        ones = jnp.ones(gradient.shape[:len(rows)], gradient.dtype)
        total = jax.lax.dot_general(gradient, ones, ((rows, rows), ((), ())),
                                    precision=jax.lax.Precision.HIGHEST,
                                    preferred_element_type=jnp.float32)
        return total.astype(bias.dtype)
    return jnp.sum(gradient, axis=rows, dtype=jnp.float32).astype(bias.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def add_bias_then(x: Array, bias: Array, activation: Callable[[Array], Array]) -> Array:
    """activation(x + bias) in x's dtype, the bias's gradient summed in float32, as
    `activation(add_bias(x, bias))`; but the backward pass keeps only `x` (the matmul's
    output, in memory anyway) and recomputes the sum and the activation's derivative from
    it. Differentiated as written, GELU keeps its input and two intermediates of its erf,
    each as large as the MLP's (B, T, 4H) activation: the forward wrote three such tensors
    and the backward read them back (issue 43: 0.40 GB a layer of BERT-Base at 32 x 512)."""
    return activation(x + bias.astype(x.dtype))


def _add_bias_then_forward(x, bias, activation):
    cast = bias.astype(x.dtype)
    return activation(x + cast), (x, cast, bias)


def _add_bias_then_backward(activation, saved, gradient):
    x, cast, bias = saved
    # Behind a barrier, or XLA finds the forward's intermediates equal to these and keeps
    # them from the forward pass after all (what `jax.checkpoint`'s prevent_cse guards).
    x, cast = jax.lax.optimization_barrier((x, cast))
    _, derivative = jax.vjp(activation, x + cast)
    (gradient,) = derivative(gradient)
    return gradient, _bias_sum(gradient, bias)


add_bias_then.defvjp(_add_bias_then_forward, _add_bias_then_backward)


def platform_product(x: Array, kernel: Array, num_inputs: int) -> Array:
    """`kernel_product` in the form the traced platform runs fastest: on a CPU, a kernel with
    at least as many outputs as inputs takes `inputs_first_product`'s gradient."""
    inputs, outputs = math.prod(kernel.shape[:num_inputs]), math.prod(kernel.shape[num_inputs:])
    if outputs >= inputs and traced_platform() == "cpu":
        return inputs_first_product(x, kernel, num_inputs)
    return kernel_product(x, kernel, num_inputs)


def kernel_product(x: Array, kernel: Array, num_inputs: int) -> Array:
    """x's last `num_inputs` dimensions contracted with the kernel's first `num_inputs`, its
    gradient by JAX's rule."""
    contracting = (tuple(range(x.ndim - num_inputs, x.ndim)), tuple(range(num_inputs)))
    return jax.lax.dot_general(x, kernel, (contracting, ((), ())))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def inputs_first_product(x: Array, kernel: Array, num_inputs: int) -> Array:
    """`kernel_product(x, kernel)`, whose kernel gradient is the inputs times the output's
    gradient, in the kernel's own order (inputs, then outputs), where JAX's rule for the
    product takes the output's gradient times the inputs, (outputs, inputs), and transposes
    that after.

    Only the operands' order in the HLO changes: with oneDNN's products the gradients are the
    same to the bit (tests/test_dense_product.py). On a CPU the order matters. XLA hands a
    product to oneDNN or YNNPACK with its left operand's contracted axis last, and for a
    kernel's gradient both operands contract over the B x T rows, so the left one is first
    copied out transposed. In JAX's order that is the output's gradient, (B x T, outputs);
    here it is the input, (B x T, inputs), and the result needs no transposing. So `Dense`
    takes this form on a CPU where a kernel has at least as many outputs as inputs (the
    QKV and GeGLU projections, attention's square ones, BERT's intermediate): the copy is
    then of the smaller operand. Where inputs outnumber outputs (the MLP's output projection)
    it keeps JAX's rule: the copy there would be of the larger, and XLA writes it in the
    forward pass fused into the activation that makes it (BERT-Base's GELU, written
    transposed: 42-85 ms a layer). GPUs and TPUs read either operand transposed without a
    copy, so they keep JAX's rule everywhere."""
    return kernel_product(x, kernel, num_inputs)


def _inputs_first_forward(x, kernel, num_inputs):
    return kernel_product(x, kernel, num_inputs), (x, kernel)


def _inputs_first_backward(num_inputs, saved, gradient):
    x, kernel = saved
    rows = tuple(range(x.ndim - num_inputs))
    outputs = tuple(range(len(rows), gradient.ndim))
    x_gradient = jax.lax.dot_general(
        gradient, kernel, ((outputs, tuple(range(num_inputs, kernel.ndim))), ((), ())))
    kernel_gradient = jax.lax.dot_general(x, gradient, ((rows, rows), ((), ())))
    return x_gradient, kernel_gradient


inputs_first_product.defvjp(_inputs_first_forward, _inputs_first_backward)


def batch_split(x: Array) -> Array:
    """`x` (B, ..., H) laid out as the encoder's activations: split along the batch only.

    For rows gathered out of the encoder's output (masked positions, [CLS] states) and the
    pooled output. Unconstrained, XLA's partitioner (jax 0.10.2, libtpu 0.0.42) splits their
    gradients along `embed` under FSDP, like the head weights beside them, and moves them back
    to the batch layout with all-to-alls and collective-permutes: a 2-layer model on v5e:2x2
    with fsdp=4 held 7 all-to-alls and 3 collective-permutes without these constraints, 2
    all-to-alls (the word-embedding lookup's, by design) and none with them.
    """
    return nn.with_logical_constraint(x, ("batch", *[None] * (x.ndim - 2), "embed"))


class Dense(nn.Module):
    """A dense layer over the last `len(input_axes)` dimensions, its kernel axes named.

    Written out rather than `nn.DenseGeneral`, which initialises a multi-axis kernel in its
    flattened 2-D shape: under a mesh that breaks the kernel's 3 logical axis names.
    `config.initializer_std` is the kernel's initial std unless `std` is given (ModernBERT
    scales its output projections down with depth); `use_bias=False` for bias-free layers.
    `activation` (e.g. `gelu`) is applied after the bias in one step (`add_bias_then`).
    `output_scale` multiplies the output, applied to the kernel and bias (a few MB) rather
    than to the (B, T, ...) output: attention's 1 / sqrt(head_dim) on the queries, which
    otherwise costs a pass over them in each direction.
    """
    config: object  # any model config (its `initializer_std` and `initializer_cutoff`)
    features: tuple[int, ...]
    input_axes: tuple[str, ...]
    output_axes: tuple[str, ...]
    precision: Precision = FLOAT32
    use_bias: bool = True
    std: float | None = None
    activation: Callable[[Array], Array] | None = None
    output_scale: float = 1.0

    @nn.compact
    def weights(self, inputs_shape: tuple[int, ...]) -> tuple[Array, Array | None]:
        """(kernel, bias or None) for inputs whose last dimensions are `inputs_shape`, in the
        parameters' dtype, `output_scale` applied: what `__call__` multiplies by, for
        `joined_projections` to join with other layers' before the product."""
        std = self.config.initializer_std if self.std is None else self.std
        init = initializer(std, *self.input_axes, *self.output_axes,
                           cutoff=self.config.initializer_cutoff)
        param_dtype = self.precision.param_dtype
        kernel = self.param("kernel", init, tuple(inputs_shape) + self.features, param_dtype)
        bias = (self.param("bias", zeros(*self.output_axes), self.features, param_dtype)
                if self.use_bias else None)
        if self.output_scale != 1.0:
            kernel = kernel * jnp.asarray(self.output_scale, kernel.dtype)
            bias = None if bias is None else bias * jnp.asarray(self.output_scale, bias.dtype)
        return kernel, bias

    def __call__(self, x: Array) -> Array:
        num_inputs = len(self.input_axes)
        kernel, bias = self.weights(x.shape[-num_inputs:])
        x, kernel = nn.dtypes.promote_dtype(x, kernel, dtype=self.precision.dtype)
        y = platform_product(x, kernel, num_inputs)
        if bias is None:
            return y if self.activation is None else self.activation(y)
        if self.activation is None:
            return add_bias(y, bias)
        return add_bias_then(y, bias, self.activation)


def joins_projections(precision: Precision) -> bool:
    """Whether the encoders multiply several projections of one input as one product
    (`joined_projections`: BERT's query, key and value; EuroBERT's too, or its keys and
    values where the queries have more heads, and its MLP's gate and up). Only where
    `precision.projections` is "joined": "auto" keeps them apart on every platform, the form
    every measured step ran, until a GPU times the joined one beside it.

    Compiled for an H100, joined is fewer kernels: XLA otherwise casts each kernel and adds
    each bias in kernels of their own, and multiplies the input's gradient back through each
    projection apart. BERT-Base's encoder layer launches 49 kernels where it launched 62,
    EuroBERT-210m's 38 where it launched 50; but BERT-Large's step moves 1.5 GB more
    (docs/gpus.md). On a CPU joined was slower: EuroBERT's 3-layer train step (2 x 1,024
    packed, oneDNN's products, the AMX Xeon), apart / joined 0.985 (7 rounds 0.956-0.999).
    A TPU's compiler has not been measured with it."""
    return precision.projections == "joined"


def joined_projections(x: Array, layers: list[Dense]) -> list[Array]:
    """Each of `layers`' outputs for input `x`, the layers alike but for their weights (the
    same features, axes, bias and no activation): their kernels and biases stacked on a new
    axis before the last dimensions, one product and one bias add, then split. The parameters
    stay the layers' own, so checkpoints and conversions see no difference; the sums are the
    same products' over the same inputs, in another kernel."""
    first = layers[0]
    num_inputs = len(first.input_axes)
    weights = [layer.weights(x.shape[-num_inputs:]) for layer in layers]
    axis = num_inputs  # the kernel's first output axis: (inputs..., layers, features...)
    kernel = jnp.stack([kernel for kernel, _ in weights], axis=axis)
    x, kernel = nn.dtypes.promote_dtype(x, kernel, dtype=first.precision.dtype)
    y = platform_product(x, kernel, num_inputs)  # (..., layers, features...)
    if first.use_bias:
        y = add_bias(y, jnp.stack([bias for _, bias in weights]))
    split = y.ndim - len(first.features) - 1
    return [jax.lax.index_in_dim(y, index, split, keepdims=False)
            for index in range(len(layers))]
