"""The same fine-tuning run in bert-jax and in Hugging Face `transformers` (PyTorch), in one process.

Both start from the same weights (all-MiniLM-L6-v2 by default), see the same training
examples for the same number of epochs with the same recipe: AdamW (betas 0.9/0.999,
eps 1e-6, weight decay 0.01 except LayerNorm parameters and biases), linear warm-up over
10% of the steps then linear decay, gradient norm clipped at 1, dropout 0.1, max 128 tokens.
PyTorch gets its best practice: `AutoModelFor...` with `DataCollatorWithPadding` (dynamic
padding to each batch's longest row, not its pad-to-max default), `torch.optim.AdamW` and
bert-jax's own learning-rate schedule through `LambdaLR`. bert-jax runs
`bert_jax.training.finetune` (length buckets) twice: first compiling, then with its compiled programs from the persistent cache
(as a repeated `bert-jax finetune` gets them). Reported per run: training wall time,
examples/s, and the dev score; then the ratio of examples/s.

Sections (`--sections`), one per task; each is a function `section(args) -> list of lines`
in SECTIONS, so CoNLL-2003 and SQuAD sections can be added beside SST-2.

CoNLL-2003 (`--sections conll2003`, --train-examples counting sentences): bert-jax
`finetune ner` against `AutoModelForTokenClassification` with
`DataCollatorForTokenClassification`, both labelling each word's first piece; dev entity F1
by the same seqeval call (strict IOB2).

Binary sentence pairs (`--sections nli_pair`): entailment against not_entailment
(neutral and contradiction) from SNLI dev, train and dev pairs disjoint, both files written
as Excel writes a TSV (byte-order mark, a header row, CRLF, quotes only where needed) and
read by bert-jax with its columns given by index; accuracy and the F1 of `entailment`
(bench/finetune_nli_pair.py).

SQuAD v2.0 (`--sections squad_v2`): can it abstain? Official v2.0 metrics, best thresholds and
the null odds' ROC AUC, the peer post-processed as transformers' utils_qa.py does
(bench/finetune_squad_v2.py).

Usage: python bench/finetune.py [--sections sst2,conll2003,squad,squad_v2,nli_pair] [--train-examples 4000] [--epochs 1]
       [--dev-examples 1190]
"""

import argparse
import os
import random
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench/model_step.py
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.finetune_recipe import (bert_jax_run, comparison_lines,  # noqa: E402
                                   minilm_directory, torch_train)
from bench.host import announce_host  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                    "shared", "data", "tasks")


def subset_tsv(source: str, count: int, seed: int, directory: str) -> str:
    """The header and `count` rows drawn at random (seeded) from a TSV with a header."""
    with open(source, encoding="utf-8") as file:
        header, *rows = file.read().splitlines()
    rows = random.Random(seed).sample(rows, min(count, len(rows)))
    path = os.path.join(directory, "train_subset.tsv")
    with open(path, "w", encoding="utf-8") as file:
        file.write("\n".join([header, *rows]) + "\n")
    return path


def read_labelled_tsv(path: str) -> tuple[list[str], list[int]]:
    """(sentences, labels) of an SST-2 file (header `label<TAB>text`)."""
    with open(path, encoding="utf-8") as file:
        rows = [line.split("\t") for line in file.read().splitlines()[1:] if line.strip()]
    return [row[1] for row in rows], [int(row[0]) for row in rows]


def bert_jax_classify(model: str, train: str, dev: str, args, workdir: str) -> dict:
    from bert_jax.tasks.classification import ClassificationTask

    # By index: SST-2's train.tsv names its text column `sentence`, dev.tsv `content`, and a
    # model reads later files by the columns it recorded.
    flags = argparse.Namespace(text_columns="1", label_column="0", header=True, train=train,
                               delimiter=None, skip_bad_rows=False, labels_as_written=False)
    task = ClassificationTask.from_arguments(flags, None)
    seconds, metrics, _ = bert_jax_run(task, model, train, dev, args, workdir)
    return dict(seconds=seconds, score=metrics["accuracy"])


def torch_classify(model_directory: str, train: str, dev: str, args) -> dict:
    """transformers: AutoModelForSequenceClassification, DataCollatorWithPadding, AdamW."""
    import torch
    import transformers

    torch.manual_seed(args.seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_directory)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        model_directory, num_labels=2)
    collator = transformers.DataCollatorWithPadding(tokenizer)

    def dataset(path):
        texts, labels = read_labelled_tsv(path)
        encoded = tokenizer(texts, truncation=True, max_length=128)
        return [dict(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=label)
                for ids, types, mask, label in zip(encoded["input_ids"], encoded["token_type_ids"],
                                                   encoded["attention_mask"], labels)]

    train_rows, dev_rows = dataset(train), dataset(dev)
    seconds = torch_train(model, train_rows, collator, args)
    correct = 0
    with torch.no_grad():
        for begin in range(0, len(dev_rows), 64):
            batch = collator(dev_rows[begin:begin + 64])
            predicted = model(**batch).logits.argmax(-1)
            correct += int((predicted == batch["labels"]).sum())
    return dict(seconds=seconds, score=correct / len(dev_rows))


def sst2(args) -> list[str]:
    model = args.model or minilm_directory()
    with tempfile.TemporaryDirectory() as directory:
        train = subset_tsv(os.path.join(DATA, "sst2", "train.tsv"), args.train_examples,
                           args.seed, directory)
        dev = os.path.join(DATA, "sst2", "dev.tsv")
        examples = args.train_examples * args.epochs
        ours = bert_jax_classify(model, train, dev, args, os.path.join(directory, "run"))
        again = bert_jax_classify(model, train, dev, args, os.path.join(directory, "again"))
        theirs = torch_classify(model, train, dev, args)
    title = (f"SST-2: {args.train_examples} training sentences (seed {args.seed}) x "
             f"{args.epochs} epoch(s), batch {args.batch_size}, lr {args.learning_rate}; "
             "dev accuracy on all 872")
    return comparison_lines(title, ours, again, theirs, examples, "accuracy")


def squad(args) -> list[str]:
    from bench.finetune_squad import squad_section

    return squad_section(args)



def subset_conll(source: str, count: int, seed: int, directory: str) -> str:
    """`count` sentences drawn at random (seeded) from a CoNLL file, -DOCSTART- dropped."""
    from input_pipeline.tasks.conll import read_conll

    sentences = read_conll(source, tag_column=None).sentences
    chosen = sorted(random.Random(seed).sample(range(len(sentences)), min(count, len(sentences))))
    path = os.path.join(directory, "train_subset.txt")
    with open(path, "w", encoding="utf-8") as file:
        for index in chosen:
            file.write("\n".join(" ".join(fields) for fields in sentences[index].fields) + "\n\n")
    return path


def bert_jax_ner(model: str, train: str, dev: str, args, workdir: str) -> dict:
    from bert_jax.tasks.token_classification import TokenClassificationTask

    flags = argparse.Namespace(
        train=train, tag_column=-1, tag_scheme="auto", label_all_subwords=False,
        freeze_encoder=False, layers="-1", combine="concat", labels_as_written=False)
    task = TokenClassificationTask.from_arguments(flags, None)
    seconds, metrics, _ = bert_jax_run(task, model, train, dev, args, workdir)
    return dict(seconds=seconds, score=metrics["f1"], labels=task.ner.label_names)


def torch_ner(model_directory: str, train: str, dev: str, labels, args) -> dict:
    """transformers: AutoModelForTokenClassification, DataCollatorForTokenClassification.

    Labels on each word's first piece, -100 elsewhere (HF's token-classification example);
    dev tags read at the first pieces and scored by the same seqeval call as bert-jax's.
    """
    import torch
    import transformers

    from bert_jax.tasks.entity_metrics import entity_scores
    from input_pipeline.tasks.conll import read_conll

    torch.manual_seed(args.seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_directory)
    model = transformers.AutoModelForTokenClassification.from_pretrained(
        model_directory, num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={label: index for index, label in enumerate(labels)})
    collator = transformers.DataCollatorForTokenClassification(tokenizer)
    label_ids = {label: index for index, label in enumerate(labels)}

    def dataset(path):
        sentences = read_conll(path).sentences
        encoded = tokenizer([list(s.words) for s in sentences], is_split_into_words=True,
                            truncation=True, max_length=128)
        rows, firsts = [], []
        for index, sentence in enumerate(sentences):
            word_ids, previous, row_labels, first = encoded.word_ids(index), None, [], []
            for position, word in enumerate(word_ids):
                starts = word is not None and word != previous
                row_labels.append(label_ids[sentence.tags[word]] if starts else -100)
                if starts:
                    first.append(position)
                previous = word
            rows.append(dict(input_ids=encoded["input_ids"][index],
                             token_type_ids=encoded["token_type_ids"][index],
                             attention_mask=encoded["attention_mask"][index], labels=row_labels))
            firsts.append(first)
        return sentences, rows, firsts

    _, train_rows, _ = dataset(train)
    dev_sentences, dev_rows, dev_firsts = dataset(dev)
    seconds = torch_train(model, train_rows, collator, args)
    predicted = []
    with torch.no_grad():
        for begin in range(0, len(dev_rows), 64):
            logits = model(**collator(dev_rows[begin:begin + 64])).logits.argmax(-1)
            for row, first in enumerate(dev_firsts[begin:begin + 64]):
                predicted.append([labels[int(i)] for i in logits[row, first]])
    # A sentence cut at 128 pieces loses its last words' predictions: score them as O.
    predicted = [tags + ["O"] * (len(s.tags) - len(tags))
                 for tags, s in zip(predicted, dev_sentences)]
    return dict(seconds=seconds, score=entity_scores([s.tags for s in dev_sentences],
                                                     predicted)["f1"])


def conll2003(args) -> list[str]:
    model = args.model or minilm_directory()
    sentences = args.train_examples
    with tempfile.TemporaryDirectory() as directory:
        train = subset_conll(os.path.join(DATA, "conll2003", "train.txt"), sentences,
                             args.seed, directory)
        dev = os.path.join(DATA, "conll2003", "valid.txt")
        ours = bert_jax_ner(model, train, dev, args, os.path.join(directory, "run"))
        again = bert_jax_ner(model, train, dev, args, os.path.join(directory, "again"))
        theirs = torch_ner(model, train, dev, ours["labels"], args)
    title = (f"CoNLL-2003: {sentences} training sentences (seed {args.seed}) x {args.epochs} "
             f"epoch(s), batch {args.batch_size}, lr {args.learning_rate}; dev entity F1 "
             "(seqeval, strict IOB2) on all 3,250 sentences")
    return comparison_lines(title, ours, again, theirs, sentences * args.epochs, "f1")


def squad_v2(args) -> list[str]:
    from bench.finetune_squad_v2 import squad_v2_section

    return squad_v2_section(args)


def nli_pair(args) -> list[str]:
    from bench.finetune_nli_pair import nli_pair_section

    return nli_pair_section(args)


SECTIONS = {"sst2": sst2, "conll2003": conll2003, "squad": squad, "squad_v2": squad_v2,
            "nli_pair": nli_pair}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="sst2", help=f"comma-separated: {list(SECTIONS)}")
    parser.add_argument("--model", default=None, help="start from (default MiniLM)")
    parser.add_argument("--train-examples", type=int, default=4000)
    parser.add_argument("--dev-examples", type=int, default=None,
                        help="squad: XQuAD-English dev questions to score (default all "
                             "1190); squad_v2: v2.0 dev subset questions (default all 4840); "
                             "nli_pair: held-out SNLI dev pairs (default 1190)")
    parser.add_argument("--single-bert-jax-run", action="store_true",
                        help="run bert-jax once (compiling), not a second time from the cache")
    parser.add_argument("--sides", default="bert-jax,transformers",
                        help="squad_v2: which sides to run (one per process runs them side "
                             "by side on a busy machine)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    announce_host("finetune")  # the CPU, its ISA, threads and load: figures carry their host
    # Before JAX is imported: a fresh cache, so that the first bert-jax run compiles.
    with tempfile.TemporaryDirectory(prefix="bench-finetune-xla-") as cache:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
        for name in args.sections.split(","):
            print("\n".join(SECTIONS[name](args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
