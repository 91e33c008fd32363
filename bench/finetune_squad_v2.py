"""The SQuAD v2.0 section of bench/finetune.py: does bert-jax learn to abstain as well as
transformers' BertForQuestionAnswering on the same budget?

Training: the first --train-examples questions of the SQuAD v2.0 training subset (4,719
questions, 348 unanswerable); dev: the first --dev-examples questions of the v2.0 dev subset
(default all 4,840, 2,477 unanswerable). Windows of 256 tokens, doc stride 128, question at
most 64 tokens, made once by `squad_windows.make_windows` (ids and offsets equal
BertTokenizerFast's, tests/test_squad_data.py): a window without the whole answer and every
window of an unanswerable question point at [CLS], as in the original `run_squad.py` and
transformers' `run_qa.py`.

bert-jax runs as a user runs it: `finetune qa`, then its own post-processing and metrics
(`bert-jax evaluate qa`). The peer trains with bench/finetune_recipe.py's recipe on the same
windows (bench/finetune_squad.py's `train_peer`), and its logits go through
`reference_postprocess` below: transformers' `postprocess_qa_predictions`
(examples/pytorch/question-answering/utils_qa.py) with `version_2_with_negative`: the null
score of a window is start[CLS] + end[CLS], a question's is the minimum over its windows,
"" when null - best span > `null_score_diff_threshold` (0). bert-jax's logits also go
through it, a check on bert-jax's own post-processing. Every prediction set is scored by the
official evaluate-v2.0.py rules (`squad_metrics.evaluate_v2` with the null odds as its
--na-prob-file), with the null odds' ROC AUC for "unanswerable" (scikit-learn).
"""

import os
import tempfile
import time

import numpy as np

from bench.finetune_squad import (MAX_SEQ_LEN, load_peer, peer_logits, subset_files,
                                  train_peer)

N_BEST, MAX_ANSWER_LEN = 20, 30


def reference_postprocess(questions, windows, start_logits, end_logits,
                          null_score_diff_threshold: float = 0.0) -> tuple[dict, dict]:
    """(predictions, null odds) by question id, as transformers' utils_qa.py computes them
    (n-best 20, answers up to 30 tokens, the window's max-context check of the original)."""
    by_question: dict[int, list[int]] = {}
    for window, question in enumerate(windows.question_index):
        by_question.setdefault(int(question), []).append(window)
    predictions, null_odds = {}, {}
    for number, question in enumerate(questions):
        null, candidates = None, []
        for window in by_question.get(number, []):
            start, end = start_logits[window], end_logits[window]
            offsets, max_context = windows.token_offsets[window], windows.max_context[window]
            if null is None or null > start[0] + end[0]:
                null = float(start[0] + end[0])
            for first in np.argsort(start)[-1:-N_BEST - 1:-1]:
                for last in np.argsort(end)[-1:-N_BEST - 1:-1]:
                    if (offsets[first, 0] < 0 or offsets[last, 0] < 0 or last < first
                            or last - first + 1 > MAX_ANSWER_LEN or not max_context[first]):
                        continue
                    candidates.append((float(start[first] + end[last]),
                                       question.context[offsets[first, 0]:offsets[last, 1]]))
        best = max(candidates, default=None)  # the best non-null span
        if best is None or null is None:
            predictions[question.question_id], null_odds[question.question_id] = "", 1e6
            continue
        null_odds[question.question_id] = null - best[0]
        predictions[question.question_id] = ("" if null - best[0] > null_score_diff_threshold
                                             else best[1])
    return predictions, null_odds


def scores(questions, predictions: dict, null_odds: dict, spans: dict) -> dict:
    """The official v2.0 metrics and the null odds' ROC AUC for unanswerable questions.

    The official best_f1 searches thresholds on the predictions as given (made at 0): an
    answerable question answered "" scores 0 at any threshold, so it never finds one above
    the threshold they were made at. `spans` (every question's best span: no abstaining)
    give the best F1 over all thresholds: `any_f1` at `any_f1_thresh`."""
    from sklearn.metrics import roc_auc_score

    from input_pipeline.tasks import squad_metrics

    metrics = squad_metrics.evaluate_v2(questions, predictions, null_odds)
    searched = squad_metrics.evaluate_v2(questions, spans, null_odds)
    metrics["any_f1"], metrics["any_f1_thresh"] = searched["best_f1"], searched["best_f1_thresh"]
    metrics["null_odds_auc"] = roc_auc_score(
        [not question.answer_texts for question in questions],
        [null_odds[question.question_id] for question in questions])
    return metrics


def _padded(rows, shape) -> np.ndarray:
    """Per-window logits (each as long as its batch was padded) as one (W, T) array."""
    out = np.full(shape, -np.inf, np.float32)
    for index, row in enumerate(rows):
        out[index, :len(row)] = row
    return out


def bert_jax_v2(model: str, train: str, dev: str, args, workdir: str) -> list[dict]:
    """bert-jax as a user runs it (`finetune qa`, `evaluate qa`), and its logits through
    the reference post-processing."""
    from bert_jax.tasks import task_from_info
    from bert_jax.tasks.question_answering import QuestionAnsweringTask, with_null_threshold
    from bert_jax.training import prediction
    from bert_jax.training.finetune import Settings, finetune, load_finetuned

    settings = Settings(epochs=args.epochs, learning_rate=args.learning_rate,
                        batch_size=args.batch_size, max_seq_len=MAX_SEQ_LEN, seed=args.seed)
    started = time.perf_counter()
    results = finetune(QuestionAnsweringTask(), model, train, None, workdir, settings,
                       show_progress=False, log=lambda *_: None)
    seconds = time.perf_counter() - started
    task, bundle, params, tokenizer, _ = load_finetuned(workdir, 64, task_from_info, "qa")
    examples = task.read_examples(dev, tokenizer, MAX_SEQ_LEN)
    logits, _ = prediction.predict(bundle, params, examples, 64, MAX_SEQ_LEN)
    answers, _, null_odds = task.answers(logits, examples.gold)
    spans = with_null_threshold(task, float("inf"), workdir).answers(logits, examples.gold)[0]
    gold = examples.gold
    shape = gold.windows.input_ids.shape
    windows = results["settings"]["num_train_examples"]
    return [dict(name="bert-jax", seconds=seconds, windows=windows,
                 **scores(gold.questions, answers, null_odds, spans)),
            dict(name="bert-jax, reference post-processing", seconds=seconds, windows=windows,
                 **reference_scores(gold.questions, gold.windows,
                                    _padded(logits["start_logits"], shape),
                                    _padded(logits["end_logits"], shape)))]


def reference_scores(questions, windows, start_logits, end_logits) -> dict:
    """`scores` of `reference_postprocess` at the threshold 0 (and at infinity: spans)."""
    predictions, null_odds = reference_postprocess(questions, windows, start_logits, end_logits)
    spans, _ = reference_postprocess(questions, windows, start_logits, end_logits, float("inf"))
    return scores(questions, predictions, null_odds, spans)


def torch_v2(model_directory: str, train: str, dev: str, args) -> dict:
    from input_pipeline.tasks import squad, squad_windows
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(model_directory)
    train_questions = squad.read_squad(train).questions
    windows = squad_windows.make_windows(train_questions, tokenizer, MAX_SEQ_LEN)
    # bert-jax gives no weight to the windows of an answerable question whose answer it
    # could not locate (a misplaced answer_start): the peer leaves them out too.
    located = np.array([q.is_impossible or bool(q.answer_spans) for q in train_questions])
    windows = _rows(windows, np.flatnonzero(located[windows.question_index]))
    model = load_peer(model_directory, args.seed)
    seconds, _ = train_peer(model, windows, args.epochs, args.batch_size, args.learning_rate,
                            args.seed)
    questions = squad.read_squad(dev).questions
    dev_windows = squad_windows.make_windows(questions, tokenizer, MAX_SEQ_LEN)
    start, end, _ = peer_logits(model, dev_windows)
    return dict(name="transformers", seconds=seconds, windows=len(windows),
                **reference_scores(questions, dev_windows, start, end))


def _rows(windows, rows):
    import dataclasses

    return dataclasses.replace(windows, **{field.name: getattr(windows, field.name)[rows]
                                           for field in dataclasses.fields(windows)})


def result_line(result: dict, epochs: int) -> str:
    return (f"  {result['name']:<37} {result['seconds']:7.1f} s "
            f"{result['windows'] * epochs / result['seconds']:6.2f} windows/s  "
            f"exact {result['exact']:.2f} F1 {result['f1']:.2f}  "
            f"HasAns {result['HasAns_exact']:.2f}/{result['HasAns_f1']:.2f}  "
            f"NoAns {result['NoAns_exact']:.2f}  "
            f"best_exact {result['best_exact']:.2f} (thresh {result['best_exact_thresh']:.3f}) "
            f"best_f1 {result['best_f1']:.2f} (thresh {result['best_f1_thresh']:.3f})  "
            f"null-odds AUC {result['null_odds_auc']:.3f}  any-threshold F1 "
            f"{result['any_f1']:.2f} (thresh {result['any_f1_thresh']:.3f})")


def squad_v2_section(args) -> list[str]:
    from bench.finetune_recipe import minilm_directory

    model = args.model or minilm_directory()
    with tempfile.TemporaryDirectory() as directory:
        train, train_count, dev, dev_count = subset_files(
            directory, "train-v2.0.subset.json", "dev-v2.0.subset.json", args, 10 ** 9)
        sides = args.sides.split(",")
        ours = bert_jax_v2(model, train, dev, args, os.path.join(directory, "run")) \
            if "bert-jax" in sides else []
        theirs = [torch_v2(model, train, dev, args)] if "transformers" in sides else []
    windows = (ours or theirs)[0]["windows"]
    lines = [f"SQuAD v2.0: the first {train_count} training questions ({windows} "
             f"windows of {MAX_SEQ_LEN}, stride 128) x {args.epochs} epoch(s), batch "
             f"{args.batch_size}, lr {args.learning_rate}, seed {args.seed}; dev subset, first "
             f"{dev_count} questions; official v2.0 metrics in points (HasAns exact/F1), "
             "thresholds on the null odds"]
    lines += [result_line(result, args.epochs) for result in (*ours, *theirs)]
    if ours and theirs:
        lines.append(f"  best_f1 difference (bert-jax - transformers): "
                     f"{ours[0]['best_f1'] - theirs[0]['best_f1']:+.2f} points; windows/s "
                     f"ratio {theirs[0]['seconds'] / ours[0]['seconds']:.2f}x")
    return lines
