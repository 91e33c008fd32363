"""`bert-jax search`: the corpus lines closest in meaning to a query (exact cosine top-k)."""

HELP = "semantic search: the corpus lines most similar to a query, or near-duplicate pairs"
DESCRIPTION = """\
Embeds every line of --corpus (as `bert-jax embed` does; empty lines are rows too) and
prints, for --query TEXT or each line of --queries FILE, the --top-k lines with the highest
cosine similarity, as tab-separated columns:
  rank  score  line  text                (with --query)
  query_line  rank  score  line  text    (with --queries; query_line numbers the query file)
Line numbers count from 1. Scores are exact (no approximate index), computed in chunks of
corpus rows, so memory is needed for the embeddings only.

The corpus embeddings are saved beside the corpus as CORPUS.bert-jax-index.npz (or at
--index) with hashes of the corpus file and of the model; a later search reuses them while
both are unchanged and rebuilds a stale index (saying so on stderr). An index is known by
a marker at its start: a file at --index that is not one (the corpus, a data file) is
refused, never replaced; a damaged index is moved aside to INDEX.damaged and rebuilt.

--dedupe THRESHOLD prints instead every pair of corpus lines whose cosine similarity is at
least THRESHOLD:  score  line_a  line_b  text_a  text_b  (line_a < line_b).

examples:
  bert-jax search --model path/to/all-MiniLM-L6-v2 --corpus faq.txt --query "how do I reset it"
  bert-jax search --model path/to/all-MiniLM-L6-v2 --corpus faq.txt --queries questions.txt \\
      --top-k 3
  bert-jax search --model path/to/all-MiniLM-L6-v2 --corpus faq.txt --dedupe 0.9
"""


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("--model", required=True,
                        help="model directory (as for `bert-jax embed`)")
    parser.add_argument("--corpus", required=True, help="text file: one document a line")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--query", help="one query text")
    what.add_argument("--queries", metavar="FILE", help="text file: one query a line")
    what.add_argument("--dedupe", type=float, metavar="THRESHOLD",
                      help="print corpus line pairs with cosine similarity >= THRESHOLD")
    parser.add_argument("--top-k", type=int, default=10,
                        help="results per query (default 10)")
    parser.add_argument("--index", default=None, metavar="PATH",
                        help="where to keep the corpus embeddings (default: beside the corpus, "
                             "CORPUS.bert-jax-index.npz)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="texts per forward pass when embedding (default 32)")
    add_progress_argument(parser)


def _clean(text: str) -> str:
    return text.replace("\t", " ")  # keeps the output's columns


def outputs(args) -> list:
    """The corpus index, checked before the model is loaded (bert_jax/storage/outputs.py): a
    file there that is not an index is refused; an index may be reused even where it cannot
    be replaced (a stale one is then one line when written)."""
    from bert_jax.embeddings.search import INDEX_KIND, default_index_path
    from bert_jax.storage.outputs import Output

    index = args.index or default_index_path(args.corpus)
    return [Output("--index", index, inputs=(("--corpus", args.corpus),
                                             ("--queries", args.queries)),
                   ours=INDEX_KIND, reusable=True)]


def run(args) -> int:
    from bert_jax.embeddings import search
    from bert_jax.embeddings.encoder import embed_texts, load_embedding_model, read_lines
    from bert_jax.errors import UserError

    if args.top_k < 1:
        raise UserError(f"--top-k must be at least 1, got {args.top_k}")
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.dedupe is not None and not -1 <= args.dedupe <= 1:
        raise UserError(f"--dedupe must be a cosine similarity in -1..1, got {args.dedupe}")
    corpus = read_lines(args.corpus, "corpus")
    queries = read_lines(args.queries, "query") if args.queries else [args.query]
    model = load_embedding_model(args.model)
    compute = lambda texts: embed_texts(  # noqa: E731
        model, texts, args.batch_size, progress=len(texts) > args.batch_size and not args.no_progress)
    embeddings = search.corpus_embeddings(args.corpus, corpus, model.fingerprint(), compute,
                                          args.index)
    if args.dedupe is not None:
        for first, second, score in search.similar_pairs(embeddings, args.dedupe):
            print(f"{score:.4f}\t{first + 1}\t{second + 1}\t{_clean(corpus[first])}\t"
                  f"{_clean(corpus[second])}")
        return 0
    scores, rows = search.top_k(embeddings, compute(queries), args.top_k)
    for query_number, (query_scores, query_rows) in enumerate(zip(scores, rows), start=1):
        prefix = f"{query_number}\t" if args.queries else ""
        for rank, (score, row) in enumerate(zip(query_scores, query_rows), start=1):
            print(f"{prefix}{rank}\t{score:.4f}\t{row + 1}\t{_clean(corpus[row])}")
    return 0
