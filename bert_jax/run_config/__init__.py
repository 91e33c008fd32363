"""Run configs: `configs/NAME.py` files whose `get_config()` returns a locked ConfigDict.

The shipped ones live in bert_jax/configs/ (configs/ links to them) and are found by name
from any directory: `--config demo` is `--config configs/demo.py`.

`load_run_config("configs/bert_base.py", ["--config.batch_size=512"])` imports the file,
calls `get_config()` (or `get_config(arg)` for `configs/NAME.py:arg`, as big_vision does),
then applies dotted overrides. A key that does not exist fails loudly, naming it and the
closest existing keys; a value is converted to the type of the value it replaces. With
`init_from`, the model's architecture comes from that model (init_from.py).
"""

import ast
import difflib
import importlib.util
import json
import os

import ml_collections

from bert_jax.errors import UserError
from bert_jax.run_config.checkpoint_suite import check_section
from bert_jax.run_config.objective import check_objective
from bert_jax.run_config.ranges import check_ranges, check_sections
from input_pipeline.mixture_config import check_sources

OVERRIDE_PREFIX = "--config."


def base_config(model_preset: str = "base") -> ml_collections.ConfigDict:
    """Every field a run config has, with the original BERT recipe's values; files override."""
    from bert_jax.models.presets import preset  # light: a dataclass module
    from bert_jax.models.families import family_of

    config = ml_collections.ConfigDict()
    config.seed = 0  # parameter initialisation, dropout and data order
    config.model_preset = model_preset  # model.* starts from it; init_from adopts unchanged ones
    # mlm_nsp: BERT's masked LM + next sentence on create-data's masked pairs; mlm: masked LM
    # only (ModernBERT) on create-data --objective mlm's rows, masks drawn when rows are read.
    config.objective = "mlm_nsp"  # pre-training objective: mlm_nsp or mlm (masked LM only)
    # The preset's config fields (models/presets.py); vocab_size 0 = the vocabulary's size.
    model = preset(model_preset, vocab_size=0)
    config.model = ml_collections.ConfigDict(model.to_dict())
    config.model.family = family_of(model).name  # bert, modernbert, eurobert: whose model.* fields
    # How this run computes (not part of the saved model: fp32 weights train on in bf16).
    config.precision = ml_collections.ConfigDict()
    config.precision.dtype = "float32"  # activations: float32 or bfloat16
    config.precision.param_dtype = "float32"  # parameter storage (keep float32 to train)
    config.precision.remat = False  # recompute each layer's activations in the backward pass
    config.precision.remat_policy = "full"  # with remat: full or matmul_outputs (kept, not redone)
    # Opt-in: measured slower to compile on the CPU, no smaller on TPU yet (docs/tpu-pods.md).
    config.precision.scan_layers = False  # the layer stack as one scanned block (layer_scan.py)
    # Cache-sized chunks of rows for attention on a CPU (bert_jax/models/layers/attention.py).
    config.precision.attention_chunk_rows = -1  # rows per device at once (0 = all, -1 = auto)
    # layers/attention_kernels.py: auto takes splash (TPU) or, on a GPU in bf16, cuDNN for
    # unpacked rows and XLA's for packed ones, when model.attention_dropout_rate is 0;
    # reference, xla, cudnn or splash force one (README: which was measured at what).
    config.precision.attention = "auto"  # attention kernel: auto, reference, xla, cudnn, splash
    # GPU opt-in: cuDNN's own masks, not yet checked on a GPU (bench/gpu/cudnn_dropout_check.py).
    config.precision.fused_attention_dropout = False  # attention dropout inside cuDNN's kernel
    config.precision.gpu_attention_bands = False  # a GPU's sliding layers in bands (opt-in)
    config.precision.gpu_band_kernel = False  # a GPU's sliding layers in one Pallas kernel (opt-in)
    # GPU opt-in: BERT's and EuroBERT's query, key and value (EuroBERT's gate and up) as one
    # product; fewer kernels compiled for an H100, not yet timed on a GPU (layers/dense.py).
    config.precision.projections = "auto"  # query, key, value as one product: auto (apart), joined
    config.init_from = ""  # model dir or training workdir to start from; brings its model.* sizes
    config.batch_size = 256  # global sequences per optimizer step, over all processes
    config.grad_accum_steps = 1  # micro-batches per step (batch_size must divide evenly)
    # Batch-size warm-up (ModernBERT's): the step starts with fewer micro-batches of the same
    # size and gains one at a time until grad_accum_steps; one compiled program serves all.
    config.batch_warmup = ml_collections.ConfigDict()
    config.batch_warmup.steps = 0  # the batch reaches batch_size at this step; 0 = no warm-up
    config.batch_warmup.start_batch_size = 0  # sequences per step at step 0; 0 = one micro-batch
    config.num_train_steps = 1_000_000  # this run (or phase) stops after this step
    config.schedule_steps = 0  # the step the learning-rate schedule ends at; 0 = num_train_steps

    config.data = ml_collections.ConfigDict()
    config.data.train_files = ""  # comma-separated TFRecord globs (may be gs://)
    config.data.eval_files = ""  # held-out shards; empty = no evaluation
    # A mixture instead of train_files: name -> dict(files=..., weight=1.0, repeat=True), set
    # in a config file (docs/pretraining.md); input_pipeline/mixture.py draws the rows.
    config.data.sources = ml_collections.ConfigDict()  # named sources mixed by weight or tau
    config.data.mixture_tau = 0.0  # > 0: p_i proportional to rows_i^tau; 0 = sources' weights
    config.data.sources_root = ""  # the directory (or gs://) sources' relative files are under
    config.data.vocab_path = ""  # the shards' vocabulary: vocab.txt, .model or tokenizer.json
    # Unset (None), the shards' manifest.json gives them when the run starts; set, they must
    # equal it (a mismatch is an error naming both). ml_collections takes an int over a None.
    config.data.seq_len = None  # tokens per sequence; None = the shards' manifest (demo: 128)
    config.data.max_predictions = None  # masks per sequence; None = the shards' manifest (demo: 20)
    config.data.max_sequences_per_row = None  # instances per row (1 = unpacked); None = the manifest
    config.data.shuffle_buffer = 10_000  # examples in the shuffle buffer
    config.data.dynamic_masking = False  # re-mask on the fly (RoBERTa) instead of the shards'
    # Objective mlm (and dynamic_masking): the fraction of real non-special tokens predicted.
    config.data.masking_rate = 0.15  # masked-LM rate from step 0 (BERT 0.15, ModernBERT 0.3)
    # Piecewise constant, each rate from its step on (mmBERT: '100000:0.15,200000:0.05').
    config.data.masking_rate_schedule = ""  # objective mlm: later rates as STEP:RATE pairs
    # Ignored when data.train_files is set (the user's shards, with their own vocabulary).
    config.data.demo_dir = ""  # if set: build vocab + shards from the stdlib corpus here
    config.data.demo_vocab_size = 4000  # size of that demo vocabulary
    config.data.demo_vocab_type = "wordpiece"  # wordpiece, or bpe: a byte-level tokenizer.json

    config.optimizer = ml_collections.ConfigDict()
    config.optimizer.name = "adamw"  # adamw (the original), lamb (large batches) or stable_adamw
    config.optimizer.learning_rate = 1e-4  # peak learning rate after warm-up
    config.optimizer.warmup_steps = 10_000  # linear warm-up from 0
    config.optimizer.schedule = "linear"  # linear (BERT's) or wsd: warm-up, stable, then decay
    config.optimizer.decay_steps = 0  # wsd: the decay takes the schedule's last N steps
    config.optimizer.decay_shape = "1-sqrt"  # wsd: linear, cosine or 1-sqrt (ModernBERT's)
    config.optimizer.final_learning_rate_ratio = 0.0  # wsd: the decay ends at this x the peak
    # A phase's own schedule (Composer's reset_time): it counts from this update; 0 = the first.
    config.optimizer.schedule_start_step = 0  # the update the warm-up (and schedule) starts at
    config.optimizer.beta1 = 0.9  # decay of the first-moment (mean) estimate
    config.optimizer.beta2 = 0.999  # decay of the second-moment (variance) estimate
    config.optimizer.epsilon = 1e-6  # added to the root of the second moment
    config.optimizer.weight_decay = 0.01  # not on LayerNorm parameters or biases
    # stable_adamw: decay x (lr / peak) per step, torch-optimi's decouple_lr (ModernBERT's 1e-5).
    config.optimizer.decouple_learning_rate = False  # weight decay follows the schedule, not lr
    config.optimizer.clip_norm = 1.0  # global gradient-norm clip; 0 = none

    config.mesh = ml_collections.ConfigDict()
    config.mesh.data = -1  # pure data parallel axis; -1 = the devices left over
    config.mesh.fsdp = 1  # fully sharded data parallel axis
    config.mesh.tensor = 1  # tensor (model) parallel axis

    config.checkpoint = ml_collections.ConfigDict()
    config.checkpoint.every_steps = 1000  # save (asynchronously) every N steps
    config.checkpoint.keep = 3  # keep the last K checkpoints
    config.checkpoint.async_save = True  # write in the background while training goes on

    config.eval = ml_collections.ConfigDict()
    config.eval.every_steps = 10_000  # evaluate on data.eval_files every N steps (and at the end)
    config.eval.num_batches = 20  # batches per evaluation
    config.eval.batch_size = 256  # global eval batch size

    config.log_every_steps = 100  # host sync for metrics, TensorBoard and the progress bar
    config.peak_flops_per_device = 0.0  # for MFU; 0 = not reported

    # A small GLUE suite at this run's checkpoints, run when training ends (checkpoint_suite.py).
    config.checkpoint_suite = ml_collections.ConfigDict()
    config.checkpoint_suite.tasks = ""  # GLUE tasks, comma-separated (sst2,stsb); '' = no suite
    config.checkpoint_suite.data = ""  # the GLUE download, tfds:glue or datasets files (as --data)
    config.checkpoint_suite.recipe = "bert"  # bert, modernbert-base or modernbert-large
    config.checkpoint_suite.learning_rates = ()  # the grid for every task; () = the recipe's
    config.checkpoint_suite.seeds = ()  # fine-tuning seeds; () = the recipe's
    config.checkpoint_suite.epochs = 0  # epochs for every task; 0 = the recipe's
    config.checkpoint_suite.batch_size = 0  # examples per fine-tuning step; 0 = the recipe's
    config.checkpoint_suite.max_seq_len = 0  # longest input in tokens; 0 = the recipe's
    config.checkpoint_suite.every = 1  # every Nth saved checkpoint (and the last); kept for it
    return config



def pod_config(model_preset: str) -> ml_collections.ConfigDict:
    """The original recipe as run on a TPU pod: base_config plus bf16 compute, sharding over
    the slice, and checkpoint/eval intervals sized for a 1M-step run."""
    config = base_config(model_preset)
    config.precision.dtype = "bfloat16"  # compute; parameters and loss stay float32
    # FSDP over every chip: the lowest roofline bound of the compiled step, with the
    # corrected HBM bytes, in 7 of the 8 (model, phase, slice) cases (bench/mesh_tables.py,
    # README): BERT-Large phase 1 at v4-64's 8 sequences per chip 7.00 ms FSDP, 9.87 mixed,
    # 15.0 data parallel; at v5e-256's one 13.1, 13.9, 18.8. In the eighth, BERT-Large phase 2
    # on v4-64, mixed (FSDP within a host) is 2% lower (42.2 against 43.0 ms), inside what an
    # unmeasured bound can tell apart, so one default serves both phases and slices; run
    # `bert-jax aot --compare-meshes` for yours. Data parallel runs the whole AdamW update on
    # every chip.
    config.mesh.data = 1
    config.mesh.fsdp = -1  # parameters and optimizer slots split over every chip
    config.checkpoint.every_steps = 5000
    config.eval.every_steps = 20_000
    config.peak_flops_per_device = 275e12  # TPU v4 bf16; set for your chip
    return config

SHIPPED_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def shipped_config_names() -> list[str]:
    """The configs that come with the package (`demo`, `laptop`, `bert_base`, ...)."""
    return sorted(name[:-3] for name in os.listdir(SHIPPED_CONFIGS)
                  if name.endswith(".py") and not name.startswith("_"))


def resolve_config_file(path: str) -> str:
    """`path` if it is a file, else the shipped config of that name, from any directory:
    `demo`, `demo.py` and `configs/demo.py` all find bert_jax/configs/demo.py."""
    if os.path.isfile(path):
        return path
    name = os.path.basename(path).removesuffix(".py")
    shipped = os.path.join(SHIPPED_CONFIGS, name + ".py")
    if os.path.dirname(path) in ("", "configs") and name in shipped_config_names():
        return shipped
    raise UserError(f"{path}: run config file not found; give a file or one of the shipped "
                    f"configs: {', '.join(shipped_config_names())}")


def import_config_file(path: str):
    spec = importlib.util.spec_from_file_location(
        f"bert_jax_run_config_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's file: report it as theirs, not as a crash
        raise UserError(f"{path}: could not be loaded: {type(error).__name__}: {error}") from error
    if not hasattr(module, "get_config"):
        raise UserError(f"{path}: defines no get_config() function")
    return module


def flatten(config: ml_collections.ConfigDict, prefix: str = "") -> dict:
    """{'optimizer.learning_rate': 1e-4, ...} for every leaf of a (nested) ConfigDict."""
    items = {}
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            items.update(flatten(value, f"{prefix}{key}."))
        else:
            items[f"{prefix}{key}"] = value
    return items


def _parse_value(key: str, text: str, current):
    """`text` converted to the type of the value it replaces."""
    if isinstance(current, bool):
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise UserError(f"--config.{key}: expected true or false, got {text!r}")
    if isinstance(current, str):
        return text
    if current is None:  # the unset optional integers (data.seq_len, data.max_predictions)
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
        if type(value) is not int and text.lower() != "none":
            raise UserError(f"--config.{key}: expected an integer (or None), got {text!r}")
        return value
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise UserError(f"--config.{key}: expected a {type(current).__name__}, "
                        f"got {text!r}") from None
    if isinstance(current, float) and isinstance(value, int):
        value = float(value)
    if isinstance(current, tuple) and isinstance(value, list):
        value = tuple(value)
    if type(value) is not type(current):
        raise UserError(f"--config.{key}: expected a {type(current).__name__}, got {text!r}")
    return value


def parse_overrides(arguments: list[str]) -> list[tuple[str, str]]:
    """['--config.a.b=1', '--config.c', '2'] -> [('a.b', '1'), ('c', '2')]."""
    pairs, index = [], 0
    while index < len(arguments):
        argument = arguments[index]
        if not argument.startswith(OVERRIDE_PREFIX):
            raise UserError(f"unrecognized argument {argument!r}; config overrides look like "
                            "--config.key=value")
        key, has_value, value = argument[len(OVERRIDE_PREFIX):].partition("=")
        if not has_value:
            if index + 1 >= len(arguments):
                raise UserError(f"{argument}: expected a value (--config.{key}=VALUE)")
            index += 1
            value = arguments[index]
        pairs.append((key, value))
        index += 1
    return pairs


def apply_overrides(config: ml_collections.ConfigDict, overrides: list[tuple[str, str]],
                    source: str = "run config") -> None:
    """Sets each dotted key; an unknown key raises UserError naming close matches."""
    known = flatten(config)
    for key, text in overrides:
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UserError(f"{source}: unknown config key {key!r}{hint}")
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        with node.ignore_type():
            node[leaf] = _parse_value(key, text, known[key])


def load_run_config(path: str, overrides: list[str] | None = None) -> ml_collections.ConfigDict:
    """The locked config of `path` (or `path:arg`) with `--config.key=value` overrides applied."""
    path, _, argument = path.partition(":")
    path = resolve_config_file(path)
    module = import_config_file(path)
    phases = getattr(module, "PHASES", None)
    if phases and not argument:  # pretrain and aot run each phase (tasks/phases.py)
        raise UserError(f"{path}: a config of phases {', '.join(map(str, phases))}: name one "
                        f"({path}:{phases[0]}); bert-jax pretrain --config {path} trains them "
                        "all in turn")
    config = module.get_config(argument) if argument else module.get_config()
    if not isinstance(config, ml_collections.ConfigDict):
        raise UserError(f"{path}: get_config() must return an ml_collections.ConfigDict")
    config.lock()
    pairs = parse_overrides(overrides or [])
    if "model_preset" in dict(pairs):
        raise UserError(f"{path}: model_preset records the preset the file's model.* start "
                        "from, it does not change them; set model.* fields (or use another "
                        "config: --config laptop is a small model)")
    apply_overrides(config, pairs, source=path)
    if config.get("init_from"):
        from bert_jax.interop import model_source
        from bert_jax.run_config.init_from import adopt_architecture

        adopt_architecture(config, [key for key, _ in pairs],
                           model_source.resolve(config.init_from).config(), source=path)
    check_ranges(flatten(config), source=path)
    check_sections(config, source=path)
    check_objective(config, source=path)
    check_section(config, source=path)
    check_sources(config, where=path)
    return config


def to_json(config: ml_collections.ConfigDict) -> str:
    return json.dumps(config.to_dict(), indent=2, sort_keys=True)
