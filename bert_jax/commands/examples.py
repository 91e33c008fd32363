"""`bert-jax examples DIR`: small example inputs for every job, for recipes run from a clone."""

HELP = "write small example inputs (a corpus, sentiment, ratings, CoNLL and SQuAD files) into DIR"
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
  bert-jax glue --model $M --data examples/glue --workdir runs/glue --tasks sst2,mrpc,stsb
"""


def _description() -> str:
    from input_pipeline.example_files import FILES

    from input_pipeline.glue_examples import DESCRIPTION as GLUE

    return DESCRIPTION.format(files="\n".join(f"  {name}: {text}" for name, text in FILES.items()),
                              glue=GLUE)


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
    from input_pipeline.example_files import write_examples
    from input_pipeline.glue_examples import DESCRIPTION as GLUE, write_glue_layout

    for path, description in write_examples(args.directory, seed=args.seed).items():
        print(f"{path}: {description}")
    glue = files.join(args.directory, "glue")
    write_glue_layout(glue, seed=args.seed)
    print(f"{glue}: {GLUE}")
    return 0
