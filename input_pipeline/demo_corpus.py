"""A default pre-training corpus that needs no download: the Python standard library's docstrings.

`make pretrain` must work on a fresh clone with no network and without shipping third-party
text. Every Python installation carries a few megabytes of English prose in its modules'
docstrings; `stdlib_docstrings.py` gathers them with `inspect`, one document per module,
split into sentences in BERT's input format (one sentence a line, a blank line between documents).
`prepare_demo_data` then trains a small WordPiece vocabulary and writes train and held-out
shards with the project's own tools: BERT's pairs, or for objective mlm masked-LM-only rows
packed `MLM_SEQUENCES_PER_ROW` to a row.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

from bert_jax.storage import files
from bert_jax.errors import UserError

MLM_SEQUENCES_PER_ROW = 3  # objective mlm's demo rows: create-data's default packing


def stdlib_documents() -> list[list[str]]:
    """One list of sentences per standard-library module that has enough prose, sorted by name.

    Gathered in a fresh `python -I -S` process (see stdlib_docstrings.py), so the corpus
    depends on the Python version alone, not on what is installed or already imported.
    """
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stdlib_docstrings.py")
    with tempfile.TemporaryDirectory() as directory:
        output = os.path.join(directory, "documents.json")
        completed = subprocess.run([sys.executable, "-I", "-S", script, output],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True, check=False)
        if completed.returncode != 0 or not os.path.exists(output):
            raise RuntimeError(f"gathering the demo corpus failed:\n{completed.stderr[-2000:]}")
        with open(output, encoding="utf-8") as file:
            return json.load(file)


def corpus_text(documents: list[list[str]]) -> str:
    """BERT input format: one sentence per line, a blank line between documents."""
    return "\n\n".join("\n".join(sentences) for sentences in documents) + "\n"


def write_corpus(documents: list[list[str]], path: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(corpus_text(documents))


def prepare_demo_data(directory: str, *, vocab_size: int, seq_len: int, max_predictions: int,
                      seed: int = 0, eval_fraction: float = 0.1,
                      objective: str = "mlm_nsp", vocab_type: str = "wordpiece") -> dict:
    """Builds (once) a vocabulary (vocab.txt; `vocab_type` bpe: a byte-level BPE
    tokenizer.json, ModernBERT's kind), train/ and eval/ shards from the stdlib corpus in
    `directory`.

    Returns {'vocab_path', 'train_files', 'eval_files'}. A complete directory is reused; a
    half-built one (interrupted) is rebuilt, since it is only renamed into place at the end.
    """
    summary_path = os.path.join(directory, "demo_data.json")
    wanted = dict(vocab_size=vocab_size, seq_len=seq_len, max_predictions=max_predictions,
                  seed=seed, eval_fraction=eval_fraction)
    if objective == "mlm":  # its shards hold no masks: max_predictions is the reader's
        wanted = dict(wanted, objective=objective, max_predictions=None)
    if vocab_type != "wordpiece":  # files built before there was a choice say nothing
        wanted = dict(wanted, vocab_type=vocab_type)
    if os.path.exists(summary_path):
        with open(summary_path, encoding="utf-8") as file:
            summary = json.load(file)
        if summary["settings"] == wanted:
            return summary["paths"]
        raise UserError(f"{directory}: holds demo data built with {summary['settings']}, "
                        f"not {wanted}; delete it or choose another data.demo_dir")
    from input_pipeline.create_data import create_pretraining_data
    from input_pipeline.vocabulary import train_bpe, train_wordpiece

    temporary = directory.rstrip("/") + ".partial"
    shutil.rmtree(temporary, ignore_errors=True)
    os.makedirs(temporary)
    documents = stdlib_documents()
    num_eval = max(1, int(len(documents) * eval_fraction))
    # Every 1/eval_fraction-th module is held out, so both sets span the alphabet.
    stride = len(documents) // num_eval
    eval_documents = documents[::stride][:num_eval]
    train_documents = [d for index, d in enumerate(documents)
                       if index % stride or index // stride >= num_eval]
    for split, split_documents in (("train", train_documents), ("eval", eval_documents)):
        write_corpus(split_documents, os.path.join(temporary, f"{split}.txt"))
    print(f"demo corpus: {sum(map(len, documents))} sentences from {len(documents)} "
          f"standard-library modules ({len(eval_documents)} held out)")
    train = train_bpe if vocab_type == "bpe" else train_wordpiece
    vocab_path = train([os.path.join(temporary, "train.txt")], vocab_size, temporary,
                       lowercase=vocab_type != "bpe")
    for split, dupe_factor in (("train", 5), ("eval", 2)):
        shape = (dict(objective="mlm", max_sequences_per_row=MLM_SEQUENCES_PER_ROW)
                 if objective == "mlm" else
                 dict(max_predictions=max_predictions, masked_lm_prob=0.15,
                      dupe_factor=dupe_factor, short_seq_prob=0.1))
        create_pretraining_data(
            [os.path.join(temporary, f"{split}.txt")], vocab_path,
            os.path.join(temporary, split), num_shards=2, max_seq_len=seq_len, seed=seed,
            workers=1, **shape)
    files.publish_directory(temporary, directory)
    paths = dict(vocab_path=os.path.join(directory, os.path.basename(vocab_path)),
                 train_files=os.path.join(directory, "train"),
                 eval_files=os.path.join(directory, "eval"))
    with files.atomic_write(summary_path) as file:
        json.dump(dict(settings=wanted, paths=paths), file, indent=2)
    return paths
