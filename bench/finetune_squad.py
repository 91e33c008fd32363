"""The SQuAD section of bench/finetune.py: `finetune qa` against transformers'
AutoModelForQuestionAnswering, on the same windows with the same post-processing.

Training: the first --train-examples questions of the SQuAD v1.1 training subset; dev: the
first --dev-examples questions of XQuAD-English (SQuAD v1.1 dev questions); windows of 256
tokens, doc stride 128, question at most 64 tokens. The peer is trained and run on exactly
the windows bert-jax makes (`squad_windows.make_windows`; its ids and offsets equal
BertTokenizerFast's, see tests/test_squad_data.py) and its logits go through the same
`squad_postprocess.postprocess` (n-best 20, answers up to 30 tokens) and official metrics,
so the two differ only in the framework. Its recipe is bench/finetune_recipe.py's: torch AdamW
(eps 1e-6, weight decay 0.01 off biases and LayerNorm), bert-jax's schedule (linear warm-up
over 10% then the original BERT's linear decay), gradient norm clipped at 1, batches padded only to their longest window (as
DataCollatorWithPadding does). Reported: training wall time (compilation included for
bert-jax), windows/s, dev EM/F1, and the ratio of windows/s.
"""

import json
import os
import tempfile
import time

import numpy as np

SQUAD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                     "shared", "data", "tasks", "squad")
MAX_SEQ_LEN = 256


def _batches(count: int, batch_size: int, rng: np.random.Generator | None):
    order = rng.permutation(count) if rng is not None else np.arange(count)
    for begin in range(0, count, batch_size):
        yield order[begin:begin + batch_size]


def _tensors(windows, rows):
    import torch

    width = int(windows.input_mask[rows].sum(axis=1).max())  # dynamic padding
    return dict(input_ids=torch.from_numpy(windows.input_ids[rows, :width].astype(np.int64)),
                token_type_ids=torch.from_numpy(windows.segment_ids[rows, :width].astype(np.int64)),
                attention_mask=torch.from_numpy(windows.input_mask[rows, :width].astype(np.int64)))


def load_peer(model_directory: str, seed: int):
    import torch
    import transformers

    torch.manual_seed(seed)
    transformers.logging.set_verbosity_error()  # qa_outputs is new: a known warning
    return transformers.AutoModelForQuestionAnswering.from_pretrained(model_directory)


def train_peer(model, windows, epochs: int, batch_size: int, learning_rate: float,
               seed: int) -> tuple[float, int]:
    """Fine-tunes `model` in place; returns (seconds, windows seen)."""
    import torch

    from bench.finetune_recipe import bert_schedule, torch_optimizer

    optimizer = torch_optimizer(model, learning_rate)
    steps = epochs * -(-len(windows) // batch_size)
    schedule = bert_schedule(optimizer, steps)
    rng = np.random.default_rng(seed)
    model.train()
    started = time.perf_counter()
    for _ in range(epochs):
        for rows in _batches(len(windows), batch_size, rng):
            inputs = _tensors(windows, rows)
            loss = model(**inputs,
                         start_positions=torch.from_numpy(windows.start_positions[rows].astype(np.int64)),
                         end_positions=torch.from_numpy(windows.end_positions[rows].astype(np.int64))).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
    return time.perf_counter() - started, epochs * len(windows)


def peer_logits(model, windows, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray, float]:
    """(start (W, T), end (W, T), seconds): padding positions left at -inf."""
    import torch

    model.eval()
    shape = windows.input_ids.shape
    start, end = np.full(shape, -np.inf, np.float32), np.full(shape, -np.inf, np.float32)
    started = time.perf_counter()
    with torch.inference_mode():
        for rows in _batches(len(windows), batch_size, None):
            inputs = _tensors(windows, rows)
            output = model(**inputs)
            width = inputs["input_ids"].shape[1]
            start[rows, :width] = output.start_logits.numpy()
            end[rows, :width] = output.end_logits.numpy()
    return start, end, time.perf_counter() - started


def first_questions(source: str, count: int, path: str) -> tuple[str, int]:
    """(path, questions) of a SQuAD file with the first `count` or slightly more questions
    of `source` (whole paragraphs)."""
    with open(source, encoding="utf-8") as file:
        document = json.load(file)
    kept, total = [], 0
    for article in document["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            if total >= count:
                break
            paragraphs.append(paragraph)
            total += len(paragraph["qas"])
        if paragraphs:
            kept.append(dict(article, paragraphs=paragraphs))
    with open(path, "w", encoding="utf-8") as file:
        json.dump(dict(document, data=kept), file)
    return path, total


def subset_files(directory: str, train_name: str, dev_name: str, args,
                 dev_default: int) -> tuple[str, int, str, int]:
    """(train path, questions, dev path, questions): the first --train-examples and
    --dev-examples (default `dev_default`) questions of two files in ../shared's squad/."""
    train, train_count = first_questions(os.path.join(SQUAD, train_name), args.train_examples,
                                         os.path.join(directory, "train.json"))
    dev, dev_count = first_questions(os.path.join(SQUAD, dev_name),
                                     args.dev_examples or dev_default,
                                     os.path.join(directory, "dev.json"))
    return train, train_count, dev, dev_count


def bert_jax_qa(model: str, train: str, dev: str, args, workdir: str) -> dict:
    from bench.finetune_recipe import bert_jax_run
    from bert_jax.tasks.question_answering import QuestionAnsweringTask

    seconds, metrics, results = bert_jax_run(QuestionAnsweringTask(), model, train, dev, args,
                                             workdir, MAX_SEQ_LEN)
    return dict(seconds=seconds, windows=results["settings"]["num_train_examples"],
                exact_match=metrics["exact_match"], f1=metrics["f1"])


def torch_qa(model_directory: str, train: str, dev: str, args) -> dict:
    from input_pipeline.tasks import squad, squad_metrics, squad_postprocess, squad_windows
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(model_directory)
    train_windows = squad_windows.make_windows(squad.read_squad(train).questions, tokenizer,
                                               MAX_SEQ_LEN)
    model = load_peer(model_directory, args.seed)
    seconds, _ = train_peer(model, train_windows, args.epochs, args.batch_size,
                            args.learning_rate, args.seed)
    questions = squad.read_squad(dev).questions
    dev_windows = squad_windows.make_windows(questions, tokenizer, MAX_SEQ_LEN)
    start, end, _ = peer_logits(model, dev_windows)
    answers, _, _ = squad_postprocess.postprocess(questions, dev_windows, start, end, False)
    metrics = squad_metrics.evaluate_v1(questions, answers)
    return dict(seconds=seconds, windows=len(train_windows), **metrics)


def squad_section(args) -> list[str]:
    from bench.finetune_recipe import comparison_lines, minilm_directory

    model = args.model or minilm_directory()
    with tempfile.TemporaryDirectory() as directory:
        train, train_count, dev, dev_count = subset_files(
            directory, "train-v1.1.subset.json", "dev-v1.1.xquad-en.json", args, 1190)
        ours = bert_jax_qa(model, train, dev, args, os.path.join(directory, "run"))
        again = bert_jax_qa(model, train, dev, args, os.path.join(directory, "again"))
        theirs = torch_qa(model, train, dev, args)
    title = (f"SQuAD v1.1: the first {train_count} training questions "
             f"({ours['windows']} windows of {MAX_SEQ_LEN}) x {args.epochs} epoch(s), batch "
             f"{args.batch_size}, lr {args.learning_rate}; XQuAD-English dev, first "
             f"{dev_count} questions")
    for result in (ours, again, theirs):  # the official metrics are in points
        result["score"] = result["f1"] / 100
        result["detail"] = f" (EM {result['exact_match']:.2f} F1 {result['f1']:.2f} points)"
    return comparison_lines(title, ours, again, theirs, ours["windows"] * args.epochs, "f1",
                            unit="windows")
