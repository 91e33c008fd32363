"""`bert-jax fill-mask`: the most likely tokens for each [MASK] in a sentence."""

HELP = "predict the tokens hidden behind [MASK] with a model's masked-LM head"
DESCRIPTION = """\
Prints, for each [MASK] in each TEXT, the --top-k most likely tokens and their probabilities
(softmax of the masked-LM logits over the whole vocabulary). The model needs a masked-LM
head: a bert-jax pre-training checkpoint or model directory, or a Hugging Face
BertForPreTraining / BertForMaskedLM directory (an encoder-only BertModel has none).

example:
  bert-jax fill-mask --model runs/demo "the man went to the [MASK] ."
"""


def add_arguments(parser) -> None:
    parser.add_argument("texts", nargs="+", metavar="TEXT",
                        help="sentence with one or more [MASK] tokens (quote it)")
    parser.add_argument("--model", required=True,
                        help="model directory (any source `bert-jax convert` reads)")
    parser.add_argument("--top-k", type=int, default=5,
                        help="how many candidates to print per [MASK] (default 5)")


def run(args) -> int:
    import bert_jax
    from bert_jax import inference
    from bert_jax.errors import UserError

    if args.top_k < 1:
        raise UserError(f"--top-k must be at least 1, got {args.top_k}")
    model = bert_jax.load(args.model)
    for text in args.texts:  # every text is checked before any is answered
        inference.masked_input(model.tokenizer, text, model.config.max_positions)
    for text in args.texts:
        predictions = model.fill_mask(text, args.top_k)
        print(text)
        for number, candidates in enumerate(predictions, start=1):
            # A byte-level BPE's word starts with its space (" Paris"): shown without it, and
            # a token of whitespace alone by its repr.
            shown = "  ".join(f"{token.strip() or repr(token)} {probability:.4f}"
                              for token, probability in candidates)
            print(f"  [MASK] {number}: {shown}")
    return 0
