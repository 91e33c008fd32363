"""`bert-jax glue`: the readers (GLUE download, HF arrow/parquet, tfds), the metrics against
scikit-learn/scipy on the predictions written, a suite killed in its third task and rerun,
recipe overrides, and bad inputs as one line."""

import codecs
import csv
import json
import os
import shutil
import signal

import numpy as np
import pytest
from finetune_helpers import tiny_model_directory
from scipy import stats
from sklearn import metrics

from bert_jax.cli import main
from bert_jax.errors import UserError
from bert_jax.evaluation import glue, glue_recipes
from bert_jax.interop import model_card
from input_pipeline.glue_examples import write_glue_layout
from input_pipeline.tasks import glue as glue_data

# The download's text and label columns, as its README and files name them (CoLA by index).
DOWNLOAD_COLUMNS = {"cola": ([3], 1), "sst2": (["sentence"], "label"),
                    "mrpc": (["#1 String", "#2 String"], "Quality"),
                    "stsb": (["sentence1", "sentence2"], "score"),
                    "qqp": (["question1", "question2"], "is_duplicate"),
                    "mnli": (["sentence1", "sentence2"], "gold_label"),
                    "qnli": (["question", "sentence"], "label"),
                    "rte": (["sentence1", "sentence2"], "label"),
                    "wnli": (["sentence1", "sentence2"], "label")}


def csv_rows(path, task):
    """(texts, label) of a GLUE TSV by Python's csv module, the BOM dropped by utf-8-sig."""
    texts, label = DOWNLOAD_COLUMNS[task]
    with open(path, encoding="utf-8-sig", newline="") as file:
        reader = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        records = list(reader)
    if task != "cola":
        header = records.pop(0)
        texts, label = [header.index(name) for name in texts], header.index(label)
    return [(tuple(record[index] for index in texts), record[label]) for record in records]


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("data") / "glue")
    write_glue_layout(directory, train_rows=16, dev_rows=8)
    return directory


def test_glue_download_layout_read_as_python_csv_reads_it(glue_dir):
    raw = open(os.path.join(glue_dir, "MRPC", "train.tsv"), "rb").read()
    assert raw.startswith(codecs.BOM_UTF8) and b"Quality\t#1 ID" in raw[:20]
    assert not open(os.path.join(glue_dir, "CoLA", "dev.tsv")).readline().startswith("source")
    for name, task in glue_data.TASKS.items():
        files = ["train.tsv", *task.dev_files]
        for split, file in zip(["train", *range(len(task.dev_files))], files):
            rows = glue_data.read_split(glue_dir, task, split)
            expected = csv_rows(os.path.join(glue_dir, task.directory, file), name)
            assert [(row.texts, row.label) for row in rows] == expected, (name, file)
    assert glue_data.source_kind(glue_dir, glue_data.TASKS["mnli"]) == "tsv"


def _dataset_table(rows, task):
    """The rows as Hugging Face's glue config stores them: text features, a class id."""
    import pyarrow

    names = task.class_names
    columns = {key: [row.texts[index] for row in rows]
               for index, key in enumerate(task.dataset_columns)}
    columns["label"] = [float(row.label) if task.regression else names.index(row.label)
                        for row in rows]
    columns["idx"] = list(range(len(rows)))
    return pyarrow.table(columns)


def test_hf_save_to_disk_and_parquet_give_the_download_rows(glue_dir, tmp_path):
    import pyarrow
    import pyarrow.parquet

    for name in ("mrpc", "stsb", "mnli"):
        task = glue_data.TASKS[name]
        splits = {"train": "train", **dict(zip(task.dev_splits, range(len(task.dev_splits))))}
        for split, which in splits.items():
            table = _dataset_table(glue_data.read_split(glue_dir, task, which), task)
            arrow_dir = tmp_path / "arrow" / name / split  # datasets' save_to_disk layout
            arrow_dir.mkdir(parents=True)
            with pyarrow.ipc.new_stream(str(arrow_dir / "data-00000-of-00001.arrow"),
                                        table.schema) as writer:
                writer.write_table(table)
            (arrow_dir / "state.json").write_text(json.dumps(
                {"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
            (tmp_path / "parquet" / name).mkdir(parents=True, exist_ok=True)
            pyarrow.parquet.write_table(
                table, str(tmp_path / "parquet" / name / f"{split}-00000-of-00001.parquet"))
        for kind in ("arrow", "parquet"):
            data = str(tmp_path / kind)
            assert glue_data.source_kind(data, task) == kind
            for which in ("train", *range(len(task.dev_splits))):
                expected = glue_data.read_split(glue_dir, task, which)
                got = glue_data.read_split(data, task, which)
                if task.regression:  # the download's "3.750" is the float 3.75
                    assert [float(row.label) for row in got] == [float(row.label)
                                                                 for row in expected]
                    expected = [row.texts for row in expected]
                    got = [row.texts for row in got]
                else:
                    expected = [(row.texts, row.label) for row in expected]
                    got = [(row.texts, row.label) for row in got]
                assert got == expected, (name, kind, which)
    with pytest.raises(UserError, match=r"cola/train-\*\.parquet \(the Hub.s files\) for task cola"):
        glue_data.read_split(str(tmp_path / "parquet"), glue_data.TASKS["cola"], "train")


def test_tfds_glue_examples_become_download_rows():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):  # the real builders' features, made-up values
        rows = glue_data.read_split("tfds:glue", glue_data.TASKS["mnli"], 1)
        scores = glue_data.read_split("tfds:glue", glue_data.TASKS["stsb"], "train")
        expected = [(example["premise"].decode(), example["hypothesis"].decode(),
                     ["entailment", "neutral", "contradiction"][example["label"]])
                    for example in tfds.as_numpy(tfds.load(
                        "glue/mnli", split="validation_mismatched", download=False))]
    assert [(*row.texts, row.label) for row in rows] == expected
    assert all(0 <= float(row.label) <= 5 and len(row.texts) == 2 for row in scores)



@pytest.mark.parametrize("task, line, message", [
    ("sst2", "a typo in the label\tO\n", r"label 'O'; GLUE's sst2 expects one of 0, 1"),
    ("mnli", "\t".join(["9"] * 8 + ["premise", "hypothesis", "neutral", "entailed"]) + "\n",
     r"label 'entailed'; GLUE's mnli expects one of entailment, neutral, contradiction"),
    ("stsb", "\t".join(["9", "g", "f", "y", "9", "n", "n", "a", "b", "four"]) + "\n",
     r"label 'four'; GLUE's stsb expects a similarity score"),
])
def test_a_label_outside_the_task_s_classes_is_an_error_naming_its_line(
        glue_dir, tmp_path, task, line, message):
    """A typo in a label cell never trains as a class of its own: the download's files name
    every task's classes, so any other cell is an error at its file and line."""
    data = str(tmp_path / "glue")
    directory = glue_data.TASKS[task].directory
    shutil.copytree(os.path.join(glue_dir, directory), os.path.join(data, directory))
    train = os.path.join(data, directory, "train.tsv")
    lines = open(train, encoding="utf-8").read().count("\n")
    with open(train, "a", encoding="utf-8") as file:
        file.write(line)
    with pytest.raises(UserError, match=rf"train\.tsv:{lines + 1}: {message}"):
        glue_data.read_split(data, glue_data.TASKS[task], "train")
SUITE_FLAGS = ["--tasks", "cola,mrpc,stsb,wnli", "--learning-rates", "1e-3",
               "--seeds", "3", "--epochs", "2", "--batch-size", "8", "--max-seq-len", "16",
               "--no-progress"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory, glue_dir):
    """One suite run straight through: (model, workdir)."""
    root = tmp_path_factory.mktemp("suite")
    model = tiny_model_directory(root)
    workdir = str(root / "straight")
    assert main(["glue", "--model", model, "--data", glue_dir, "--workdir", workdir,
                 "--recipe", "bert", *SUITE_FLAGS]) == 0
    return model, workdir


def _read_jsonl(path):
    return [json.loads(line) for line in open(path)]


def test_metrics_equal_sklearn_and_scipy_on_the_predictions_written(suite):
    _, workdir = suite
    table = json.load(open(os.path.join(workdir, "glue.json")))
    for task in ("cola", "mrpc", "stsb"):
        run = os.path.join(workdir, "runs", task, "lr0.001-seed3")
        predicted = [row["label"] for row in _read_jsonl(os.path.join(run, "eval_predictions.jsonl"))]
        gold = [row["label"] for row in _read_jsonl(os.path.join(workdir, "data", task,
                                                                 "dev.jsonl"))]
        if task == "stsb":
            gold = np.array(gold, float)
            expected = {"pearson": stats.pearsonr(predicted, gold)[0],
                        "spearman": stats.spearmanr(predicted, gold)[0]}
        elif task == "cola":
            expected = {"mcc": metrics.matthews_corrcoef(gold, predicted)}
        else:
            expected = {"accuracy": metrics.accuracy_score(gold, predicted)}
            if task == "mrpc":
                expected["f1"] = metrics.f1_score(gold, predicted, pos_label="1")
        assert table[task] == pytest.approx(expected, abs=1e-12), task
    wnli_gold = [row["label"] for row in _read_jsonl(os.path.join(workdir, "data", "wnli",
                                                                  "dev.jsonl"))]
    majority = max(sorted(set(wnli_gold)), key=[row["label"] for row in _read_jsonl(
        os.path.join(workdir, "data", "wnli", "train.jsonl"))].count)
    assert table["wnli"]["accuracy"] == pytest.approx(wnli_gold.count(majority) / len(wnli_gold))
    scores = [np.mean(list(table[task].values())) for task in ("cola", "mrpc", "stsb")]
    assert table["average"] == pytest.approx(np.mean(scores), abs=1e-12)  # WNLI left out


def test_recipe_flags_reach_every_run(suite):
    _, workdir = suite
    config = json.load(open(os.path.join(workdir, "runs", "mrpc", "lr0.001-seed3",
                                         "run_config.json")))
    assert (config["seed"], config["batch_size"], config["data"]["seq_len"]) == (3, 8, 16)
    assert config["optimizer"]["learning_rate"] == 1e-3
    assert (config["optimizer"]["weight_decay"], config["finetune"]["warmup_fraction"]) == (
        0.01, 0.1)
    assert json.load(open(os.path.join(workdir, "runs", "mrpc", "lr0.001-seed3",
                                       "eval_results.json")))["settings"]["epochs"] == 2
    recipe = glue_recipes.recipe("modernbert-base")
    overrides = glue._overrides(recipe, glue.Run("mrpc", 5e-5, 0), ["--config.x=1"])
    # ModernBERT's MRPC decoupled weight decay 5e-6, as optax's adamw takes it (times lr).
    assert overrides == ["--config.finetune.warmup_fraction=0.1",
                         "--config.optimizer.beta2=0.98", "--config.optimizer.epsilon=1e-06",
                         f"--config.optimizer.weight_decay={5e-6 / 5e-5}", "--config.x=1"]
    assert recipe.tasks["cola"].learning_rates == (8e-5,) and recipe.tasks["cola"].epochs == 5
    changed = recipe.overridden(learning_rates=(1e-5, 2e-5), epochs=4)
    assert changed.tasks["cola"].learning_rates == (1e-5, 2e-5)
    assert (changed.tasks["rte"].epochs, changed.tasks["rte"].batch_size) == (4, 64)
    runs = glue.plan(recipe, ["rte", "cola", "mnli"])
    assert [run.task for run in runs][:3] == ["mnli"] * 3  # others start from it
    assert glue.plan(glue_recipes.recipe("bert"), ["cola"]) == [
        glue.Run("cola", rate, seed) for rate in (2e-5, 3e-5, 5e-5) for seed in (0, 1, 2)]


class Killed(Exception):
    pass


def test_a_suite_killed_in_its_third_task_continues_and_gives_the_same_table(
        suite, tmp_path, glue_dir, monkeypatch):
    model, straight = suite
    workdir = str(tmp_path / "killed")
    arguments = ["glue", "--model", model, "--data", glue_dir, "--workdir", workdir,
                 "--recipe", "bert", *SUITE_FLAGS]
    started = []
    real_finetune = glue.finetune

    def finetune(task, model, train, dev, directory, *args, log=print, **kwargs):
        started.append(directory)

        def killing_log(message):  # killed at the third task's first evaluation
            if len(started) == 3 and message.startswith("\nstep"):
                raise Killed(directory)
            log(message)
        return real_finetune(task, model, train, dev, directory, *args, log=killing_log,
                             **kwargs)

    monkeypatch.setattr(glue, "finetune", finetune)
    with pytest.raises(Killed):
        main(arguments)
    assert not os.path.exists(os.path.join(workdir, "glue.json"))
    assert os.path.exists(os.path.join(started[2], "checkpoints"))  # its first epoch
    killed_in, started[:] = started[2], []
    assert main(arguments) == 0
    assert started == [killed_in]
    for name in ("glue.json", "glue.md"):
        assert open(os.path.join(workdir, name)).read() == open(
            os.path.join(straight, name)).read()
    started[:] = []
    assert main(arguments) == 0 and started == []  # finished: nothing runs again


def test_ctrl_c_in_a_run_exits_130_with_its_checkpoint_and_the_rerun_continues_it(
        suite, tmp_path, glue_dir, monkeypatch, capfd):
    model, straight = suite
    workdir = str(tmp_path / "interrupted")
    flags = SUITE_FLAGS[2:]  # one task (mrpc), the rest of the suite's flags
    arguments = ["glue", "--model", model, "--data", glue_dir, "--workdir", workdir,
                 "--recipe", "bert", "--tasks", "mrpc", *flags]
    real_finetune = glue.finetune

    def finetune(*args, log=print, **kwargs):
        def interrupting_log(message):  # Ctrl-C during the first epoch's evaluation
            if message.startswith("\nstep"):
                os.kill(os.getpid(), signal.SIGINT)
            log(message)
        return real_finetune(*args, log=interrupting_log, **kwargs)

    monkeypatch.setattr(glue, "finetune", finetune)
    capfd.readouterr()
    assert main(arguments) == 130
    error = capfd.readouterr().err
    assert "GLUE suite stopped in mrpc lr 0.001 seed 3; the same command continues it" in error
    assert "Traceback" not in error and not os.path.exists(os.path.join(workdir, "glue.json"))
    run = glue.Run("mrpc", 1e-3, 3)
    assert os.path.exists(os.path.join(run.directory(workdir), "checkpoints"))
    assert glue.finished(run, workdir) is None

    monkeypatch.setattr(glue, "finetune", real_finetune)
    assert main(arguments) == 0
    # The resumed run is the uninterrupted one: the same dev metrics as the straight suite's.
    assert glue.finished(run, workdir)["metrics"] == glue.finished(run, straight)["metrics"]


def _error_line(capsys, arguments):
    assert main(arguments) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    return error


def test_bad_inputs_are_one_line(suite, glue_dir, tmp_path, capsys):
    model, straight = suite
    base = ["glue", "--model", model, "--data", glue_dir, "--workdir", str(tmp_path / "w")]
    assert "unknown GLUE task 'cola2'" in _error_line(capsys, base + ["--tasks", "cola2"])
    assert "--recipe 'roberta'" in _error_line(capsys, base + ["--recipe", "roberta"])
    assert "--compare 'gpt'" in _error_line(capsys, base + ["--compare", "gpt"])
    assert "no glue.json" in _error_line(capsys, base + ["--compare-run", str(tmp_path)])
    assert "--glue-run" in _error_line(capsys, ["convert", model, str(tmp_path / "hf"), "--to",
                                                "hf", "--glue-run", str(tmp_path)])
    empty = str(tmp_path / "empty")
    os.makedirs(empty)
    assert "no CoLA/train.tsv" in _error_line(capsys, base[:3] + [
        "--data", empty, "--workdir", str(tmp_path / "w2"), "--tasks", "cola"])
    assert "holds a suite of another recipe" in _error_line(capsys, [
        "glue", "--model", model, "--data", glue_dir, "--workdir", straight, "--recipe",
        "modernbert-base", *SUITE_FLAGS])


def test_published_rows_and_another_run_print_beside_the_table(suite, tmp_path, glue_dir,
                                                                capsys):
    model, straight = suite
    workdir = str(tmp_path / "copy")
    shutil.copytree(straight, workdir)
    capsys.readouterr()
    assert main(["glue", "--model", model, "--data", glue_dir, "--workdir", workdir,
                 "--recipe", "bert", *SUITE_FLAGS, "--compare", "modernbert-base",
                 "--compare-run", straight]) == 0
    printed = capsys.readouterr().out
    table = json.load(open(os.path.join(straight, "glue.json")))
    ours = f"| {100 * table['cola']['mcc']:.1f} | {100 * table['mrpc']['f1']:.1f}/"
    assert printed.count(ours) == 2  # this run's row and the other run's
    assert f"| {straight} |" in printed
    # ModernBERT-base's published CoLA, MRPC, STS-B (Warner et al. 2024, Table 5), average.
    assert "| ModernBERT-base (published) | 65.1 | 92.2 | 91.8 |  | 88.4 |" in printed
    written = open(os.path.join(workdir, "glue.md")).read()
    assert "ModernBERT-base (published)" in written and "appendix E.1 Table 5" in written


def test_convert_to_hf_writes_a_hub_model_card_with_the_glue_table(suite, tmp_path):
    from huggingface_hub import ModelCard

    model, straight = suite
    destination = str(tmp_path / "hf")
    assert main(["convert", model, destination, "--to", "hf", "--glue-run", straight]) == 0
    card = ModelCard.load(os.path.join(destination, "README.md"))  # the Hub's own parser
    assert card.data.library_name == "transformers" and "bert-jax" in card.data.tags
    table = json.load(open(os.path.join(straight, "glue.json")))
    results = {(result.dataset_config, result.metric_type): result.metric_value
               for result in card.data.eval_results}
    assert results == {(task, metric): pytest.approx(value, abs=5e-5)
                       for task, metrics in table.items() if task not in ("average", "wnli")
                       for metric, value in metrics.items()}
    assert "| CoLA (MCC) |" in card.text and "No training run was found" in card.text
    run = os.path.join(straight, "runs", "mrpc", "lr0.001-seed3")  # found above best/
    text = model_card.model_card("m", os.path.join(run, "best"),
                                 "BertForSequenceClassification", "bert")
    assert f"training data: `{os.path.join(straight, 'data', 'mrpc', 'train.jsonl')}`" in text
    assert "peak learning rate 0.001" in text and "| CoLA (MCC) |" in text
    assert "pipeline_tag: text-classification" in text
