"""`bert-jax retrieval`: nDCG@10, Recall@100 and MRR@10 of an embedding model on a BEIR dataset."""

HELP = "retrieval metrics (nDCG@10, Recall@100, MRR@10) of an embedding model on a BEIR dataset"
DESCRIPTION = """\
Embeds every document and judged query of the BEIR-format dataset --data (corpus.jsonl,
queries.jsonl, qrels/SPLIT.tsv; local or gs://), ranks the documents of each query by exact
cosine similarity (as `bert-jax search`), and writes into --workdir:
  retrieval.json  {"ndcg@10": ..., "recall@100": ..., "mrr@10": ...}, means over the judged
                  queries, as fractions
  run.trec        the top --top-k documents of each query, one line each in the TREC run
                  format: query-id Q0 doc-id rank score bert-jax

The files are read as BEIR's GenericDataLoader reads them (the qrels' header line skipped,
the queries those the qrels name); a document is embedded as BEIR's sentence-transformers
wrapper embeds it, its title and text joined by a space; a document whose id is the query's
own is no hit (BEIR's default). The model embeds as `bert-jax embed` does, at its own
maximum length (a sentence-transformers directory's max_seq_length; else its positions).
nDCG@10 and Recall@100 are trec_eval's (through ir-measures and pytrec_eval, what BEIR's
evaluator calls), MRR@10 MS MARCO's official code's (through ir-measures).

example:
  bert-jax retrieval --model path/to/all-MiniLM-L6-v2 --data path/to/scifact --workdir runs/scifact
"""


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("--model", required=True,
                        help="embedding model directory (as for `bert-jax embed`)")
    parser.add_argument("--data", required=True, metavar="DIR",
                        help="BEIR dataset directory: corpus.jsonl, queries.jsonl, qrels/")
    parser.add_argument("--workdir", required=True, metavar="DIR",
                        help="where retrieval.json and run.trec are written")
    parser.add_argument("--split", default="test",
                        help="the judgements to score: qrels/SPLIT.tsv (default test)")
    parser.add_argument("--top-k", type=int, default=100,
                        help="documents kept per query in run.trec, at least 100 (default 100)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="texts per forward pass (default 32)")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="truncate each text to this many tokens incl. [CLS]/[SEP] "
                             "(default: the model's own maximum length)")
    add_progress_argument(parser)


def outputs(args) -> list:
    """The work directory, checked before the model is loaded (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import DIRECTORY, Output

    return [Output("--workdir", args.workdir, DIRECTORY)]


def run(args) -> int:
    from bert_jax.embeddings.encoder import load_embedding_model
    from bert_jax.errors import UserError
    from bert_jax.evaluation import retrieval
    from bert_jax.storage import files
    from input_pipeline.tasks.beir_data import read_beir

    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    retrieval.check_top_k(args.top_k)
    dataset = read_beir(args.data, args.split)
    model = load_embedding_model(args.model, max_seq_len=args.max_seq_len)
    metrics, run = retrieval.evaluate(model, dataset, args.top_k, args.batch_size,
                                      progress=not args.no_progress)
    retrieval.write_results(args.workdir, metrics, run)
    print(f"{retrieval.metrics_line(metrics)}  ({len(dataset.query_ids)} queries, "
          f"{len(dataset.document_ids)} documents; {model.settings.describe()})")
    print(f"wrote {files.join(args.workdir, retrieval.METRICS_FILE)} and "
          f"{files.join(args.workdir, retrieval.RUN_FILE)}")
    return 0
