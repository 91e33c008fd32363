"""`bert-jax convert SRC DST`: move weights between bert-jax, Hugging Face and TensorFlow."""

import sys

from bert_jax.errors import UserError

HELP = ("convert a model between bert-jax, Hugging Face and original TF BERT checkpoints, "
        "or export a TensorFlow SavedModel")
DESCRIPTION = """\
Reads SRC (a Hugging Face BERT directory with model.safetensors, a bert-jax model directory,
an original google-research/bert checkpoint directory with bert_config.json, a training work
directory (its latest checkpoint) or one of its checkpoints/<step> directories) and writes DST
as one of:
  hf             a Hugging Face directory (config.json, model.safetensors, vocab.txt,
                 tokenizer_config.json): loads with transformers' BertForPreTraining /
                 BertForMaskedLM / BertModel.from_pretrained;
  bert-jax       a bert-jax model directory (model_config.json, vocab.txt, params/); a
                 sentence-transformers SRC's pooling, normalisation and length are kept
                 (modules.json, 1_Pooling/), so `bert-jax embed` on DST equals it on SRC
                 (hf, tf-checkpoint and saved-model have no place for them: a note says so);
  tf-checkpoint  an original google-research/bert checkpoint (bert_model.ckpt.index,
                 bert_model.ckpt.data-00000-of-00001, bert_config.json, vocab.txt) with the
                 released checkpoints' variable names and shapes (bert/..., cls/predictions/...,
                 cls/seq_relationship/...; a sequence classifier as run_classifier.py's
                 output_weights / output_bias): --init_checkpoint=DST/bert_model.ckpt;
  sentence-transformers
                 a Hugging Face BertModel directory plus modules.json,
                 1_Pooling/config.json and sentence_bert_config.json:
                 sentence_transformers.SentenceTransformer(DST) loads it, and its encode()
                 equals `bert-jax embed --model SRC` (SRC's pooling, normalisation and
                 length travel with it);
  saved-model    a TensorFlow SavedModel running the bert-jax function (jax2tf, batch and
                 length left unknown): signature serving_default (input_ids, input_mask,
                 segment_ids -> sequence_output, pooled_output, and logits for a sequence
                 classifier) and, with the pre-training heads, pretraining
                 (+ masked_lm_positions -> mlm_logits, nsp_logits). For TF Serving write
                 it to MODELS/NAME/1 (see the README).
A head that the target format has no names for (e.g. a token classifier for the TF formats)
is refused with its name.
A fine-tuned model (`bert-jax finetune`, e.g. WORKDIR/best) becomes, with --to hf, a
BertForSequenceClassification, BertForTokenClassification (with its label names: id2label,
label2id) or BertForQuestionAnswering directory, and such Hugging Face directories import
with their heads and labels.
With --to hf, DST also gets a model card (README.md in the Hub's format): the base model, the
training data and recipe (the run's run_config.json and eval_results.json, found beside SRC
or above it) and, when the run has one, the GLUE table (a glue.json above SRC, or the suite
--glue-run names), also as the card's model-index.
The tokenizer travels with the weights: vocab.txt (with tokenizer_config.json), a
sentencepiece.model, or a tokenizer.json (ModernBERT's byte-level BPE) with its
tokenizer_config.json and special_tokens_map.json, which transformers' AutoTokenizer reads.

DST is written to a temporary directory and renamed when complete; it must not exist or be
empty unless --overwrite, and it may not lie inside a training run or contain SRC. Either
may be a gs:// URL.

examples:
  bert-jax convert runs/demo exported/demo-hf --to hf
  bert-jax convert path/to/hf-bert models/bert-jax-copy
  bert-jax convert runs/demo exported/demo-tf --to tf-checkpoint
  bert-jax convert runs/demo serving/bert/1 --to saved-model
  bert-jax convert runs/sst2/best exported/sst2-hf --to hf
  bert-jax convert runs/sts/best exported/sts-st --to sentence-transformers
"""


def add_arguments(parser) -> None:
    from bert_jax.interop.saved_model import DEFAULT_PLATFORMS  # numpy, but no JAX or TF

    parser.add_argument("source", metavar="SRC", help="model directory to read")
    parser.add_argument("destination", metavar="DST", help="directory to write")
    parser.add_argument(
        "--to", choices=("hf", "bert-jax", "tf-checkpoint", "saved-model",
                         "sentence-transformers"), default=None,
        help="format of DST (default: bert-jax when SRC is a Hugging Face directory, else hf)")
    parser.add_argument(
        "--hf-architecture", choices=("auto", "BertForPreTraining", "BertForMaskedLM", "BertModel",
                                      "ModernBertForMaskedLM", "ModernBertModel"),
        default="auto",
        help="with --to hf: which transformers class the files are laid out for, so that it "
             "loads with no unexpected keys (default auto: BertForPreTraining when the model "
             "has both pre-training heads, BertForMaskedLM with only the MLM head, else "
             "BertModel; a ModernBERT model: ModernBertForMaskedLM with its MLM head, else "
             "ModernBertModel; a fine-tuned model: its task's class)")
    parser.add_argument(
        "--platforms", default=",".join(DEFAULT_PLATFORMS), metavar="LIST",
        help="with --to saved-model: comma-separated platforms to lower for, a subset of "
             "cpu,cuda,rocm,tpu (default %(default)s)")
    parser.add_argument(
        "--vocab", default=None, metavar="VOCAB",
        help="the tokenizer to ship with DST when SRC has none beside its weights: vocab.txt, "
             "a SentencePiece .model, a tokenizer.json, or a directory holding one")
    parser.add_argument(
        "--glue-run", default=None, metavar="WORKDIR",
        help="with --to hf: the `bert-jax glue` work directory whose table goes into the model "
             "card (default: a glue.json in SRC or the directories above it)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace DST if it exists and is not empty")


def outputs(args) -> list:
    """DST, checked before the source is read (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import PUBLISHED, Output

    return [Output("DST", args.destination, PUBLISHED, inputs=(("SRC", args.source),))]


def run(args) -> int:
    from bert_jax.interop import model_source, model_writers

    if args.to == "sentence-transformers":  # its encoder may sit in a subdirectory
        from bert_jax.embeddings.sentence_transformers_export import export

        summary = export(args.source, args.destination, args.overwrite)
        print(f"wrote sentence-transformers model ({summary}) to {args.destination}")
        return 0
    if args.glue_run:  # before the weights are read
        from bert_jax.evaluation.glue_table import read_run

        read_run(args.glue_run, "--glue-run")
    source, embedding = _source_and_embedding(args.source)
    kind = source.kind
    target = args.to or ("bert-jax" if kind == "huggingface" else "hf")
    vocab_path = args.vocab or source.vocab_path
    if vocab_path is None:
        from input_pipeline.vocabulary_files import no_tokenizer_error
        raise UserError(f"{no_tokenizer_error(source.metadata_directory, args.source)}; pass "
                        "one with --vocab")
    config = source.config()
    if target in ("tf-checkpoint", "saved-model"):
        model_writers.refuse_other_families(config, f"--to {target}")
    tokenizer = model_source.checked_tokenizer(vocab_path, config, args.source)
    if tokenizer.vocab_size != config.vocab_size:
        raise UserError(f"{vocab_path}: {tokenizer.vocab_size} tokens, but the model's "
                        f"vocab_size is {config.vocab_size}")
    params = source.load().params
    task_info = source.task_info()  # a fine-tuned model's task and labels
    sources = (source.directory,)
    if target == "tf-checkpoint":
        parts = model_writers.export_tf_checkpoint(config, params, tokenizer, args.destination,
                                                   args.overwrite, sources)
        print(f"wrote original TF checkpoint ({kind} -> {', '.join(parts)}) to "
              f"{args.destination}")
    elif target == "saved-model":
        from bert_jax.progress import elapsed

        # Lowering the model for every platform takes from seconds to minutes: say so.
        with elapsed(f"lowering the model for {args.platforms} and writing the SavedModel"):
            signatures = model_writers.export_saved_model(
                config, params, tokenizer, args.destination, _platforms(args.platforms),
                args.overwrite, sources)
        print(f"wrote TensorFlow SavedModel ({kind} -> signatures {', '.join(signatures)}) to "
              f"{args.destination}")
    elif target == "hf":
        architecture = None if args.hf_architecture == "auto" else args.hf_architecture
        head = task_info["head"] if task_info and architecture is None else None
        from bert_jax.interop import model_card
        from bert_jax.models.families import family_of

        card = model_card.writer(args.source, source.directory, family_of(config).name,
                                 args.glue_run)
        written = model_writers.export_huggingface(config, params, tokenizer, args.destination,
                                                   architecture, args.overwrite, head=head,
                                                   extra_files=card, sources=sources)
        print(f"wrote {written} ({kind} -> Hugging Face) to {args.destination}")
    else:
        model_writers.save_model(config, params, tokenizer, args.destination, args.overwrite,
                                 task_info=task_info, sources=sources,
                                 extra_files=_embedding_files(embedding, config.hidden_dim))
        kept = f"; kept its {embedding.describe()}" if embedding else ""
        print(f"wrote bert-jax model ({kind} -> bert-jax{kept}) to {args.destination}")
    if embedding and target not in ("bert-jax", "sentence-transformers"):
        print(f"note: {target} has no place for {args.source}'s sentence embedding "
              f"({embedding.describe()}); --to sentence-transformers or --to bert-jax keeps it",
              file=sys.stderr)
    return 0


def _source_and_embedding(path: str):
    """(the source of the weights, its sentence-embedding settings or None when they are the
    defaults any encoder gets): a sentence-transformers directory's pooling, normalisation
    and length (modules.json; its encoder may sit in a subdirectory), or a fine-tuned
    sentence-embedding model's."""
    from bert_jax.embeddings.encoder import embedding_source
    from bert_jax.embeddings.model_directory import EmbeddingSettings
    from bert_jax.interop import model_source

    try:
        source, settings = embedding_source(path)
    except UserError as error:  # modules bert-jax does not run (a Dense layer, a prompt)
        print(f"note: {error}; converting the encoder alone", file=sys.stderr)
        return model_source.resolve(path), None
    return source, (None if settings == EmbeddingSettings() else settings)


def _embedding_files(settings, hidden_dim: int):
    """Writes the pooling files into a bert-jax directory (read as a sentence-transformers
    directory's are), or None without settings to keep."""
    from bert_jax.embeddings.model_directory import write_settings

    return None if settings is None else (
        lambda directory: write_settings(directory, settings, hidden_dim))


def _platforms(text: str) -> tuple[str, ...]:
    from bert_jax.interop.saved_model import PLATFORMS

    platforms = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(set(platforms) - set(PLATFORMS))
    if unknown or not platforms:
        raise UserError(f"--platforms {text!r}: expected a comma-separated subset of "
                        f"{','.join(PLATFORMS)}")
    return platforms
