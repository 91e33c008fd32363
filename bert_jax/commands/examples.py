"""`bert-jax examples DIR`: small example inputs for every job, for recipes run from a clone."""

HELP = ("write small example inputs (a corpus, sentiment, ratings, sentence pairs, CoNLL, SQuAD "
        "and a treebank) into DIR")
DESCRIPTION = """\
Writes into DIR (created if needed; files there of the same names are replaced):

{files}
  glue/: {glue}

The corpus is the Python standard library's docstrings (what `make pretrain` trains on); the
task files are made up from templates written for this project (no third-party text), the
same for the same --seed. Evaluation rows use phrases and names that training rows never
show. A few seconds.

examples:
  bert-jax examples examples/
  M=sentence-transformers/all-MiniLM-L6-v2
  bert-jax finetune classify --model $M --learning-rate 1e-4 \\
      --train examples/sentiment_train.tsv --eval examples/sentiment_dev.tsv --workdir runs/sentiment
  bert-jax finetune regress --model $M --learning-rate 2e-4 --epochs 8 \\
      --train examples/ratings_train.tsv --eval examples/ratings_dev.tsv --workdir runs/ratings
  bert-jax finetune ner --model $M --learning-rate 1e-4 \\
      --train examples/ner_train.txt --eval examples/ner_dev.txt --workdir runs/ner
  bert-jax finetune qa --model $M --learning-rate 1e-4 \\
      --train examples/squad_train.json --eval examples/squad_dev.json --workdir runs/qa
  bert-jax finetune sentence-embedding --model $M --loss cosent \\
      --train examples/pairs_train.jsonl --eval examples/pairs_dev.jsonl --workdir runs/pairs
  bert-jax probe --model $M --treebank examples/treebank.conllu --output probe/
  bert-jax glue --model $M --data examples/glue --workdir runs/glue --tasks sst2,mrpc,stsb
"""


def _writers() -> list:
    """(FILES, write(directory, seed)) of each module that writes examples, in order."""
    from input_pipeline import example_files, example_pairs, example_treebank

    return [(example_files.FILES, example_files.write_examples),
            (example_pairs.FILES, example_pairs.write_pairs),
            (example_treebank.FILES, example_treebank.write_treebank)]


def _description() -> str:
    from input_pipeline.glue_examples import DESCRIPTION as GLUE

    return DESCRIPTION.format(files="\n".join(f"  {name}: {text}" for names, _ in _writers()
                                              for name, text in names.items()), glue=GLUE)


def add_arguments(parser) -> None:
    parser.description = _description()
    parser.add_argument("directory", metavar="DIR", help="where to write the files")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the made-up task files (default 0)")


def outputs(args) -> list:
    """DIR, checked before anything is written (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import DIRECTORY, Output

    return [Output("DIR", args.directory, DIRECTORY)]


def run(args) -> int:
    from bert_jax.storage import files
    from input_pipeline.glue_examples import DESCRIPTION as GLUE, write_glue_layout

    for _, write in _writers():
        for path, description in write(args.directory, seed=args.seed).items():
            print(f"{path}: {description}")
    glue = files.join(args.directory, "glue")
    write_glue_layout(glue, seed=args.seed)
    print(f"{glue}: {GLUE}")
    return 0
