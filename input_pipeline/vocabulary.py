"""Training a vocabulary: WordPiece through `tokenizers`, SentencePiece through `sentencepiece`.

Both read the same sources as the shard writer (BERT-format or prose files, .gz, globs),
and both put BERT's special tokens [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4.
"""

import json
import os

from bert_jax.storage import files as file_layer
from bert_jax.errors import UserError
from input_pipeline import sources
from input_pipeline.vocabulary_files import SENTENCEPIECE_MODEL, SPECIAL_TOKENS


def _sentences(files: list[str], input_format: str, encoding_errors: str, lowercase: bool):
    for document in sources.read_documents(files, input_format, encoding_errors):
        for sentence in document:
            yield sentence.lower() if lowercase else sentence


def _write_tokens(tokens: list[str], output_dir: str, lowercase: bool) -> str:
    """vocab.txt (one token a line, id = line) and tokenizer_config.json, atomically."""
    vocab_path = file_layer.join(output_dir, "vocab.txt")
    with file_layer.atomic_write(file_layer.join(output_dir, "tokenizer_config.json")) as file:
        json.dump({"do_lower_case": lowercase}, file)
    file_layer.write_text(vocab_path, "".join(token + "\n" for token in tokens))
    return vocab_path


def train_wordpiece(files: list[str], vocab_size: int, output_dir: str, lowercase: bool = True,
                    *, input_format: str = "bert", encoding_errors: str = "strict",
                    min_frequency: int = 2) -> str:
    """Trains a BERT WordPiece vocabulary on `files` (paths or globs); returns vocab.txt's path."""
    import tokenizers
    from tokenizers import models, normalizers, pre_tokenizers, trainers
    if vocab_size <= len(SPECIAL_TOKENS):
        raise UserError(f"--size {vocab_size}: a vocabulary needs more than the "
                        f"{len(SPECIAL_TOKENS)} special tokens")
    backend = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##", show_progress=False)
    backend.train_from_iterator(
        _sentences(files, input_format, encoding_errors, lowercase=False), trainer=trainer)
    vocabulary = backend.get_vocab()
    tokens = sorted(vocabulary, key=vocabulary.get)
    return _write_tokens(tokens, output_dir, lowercase)


def train_sentencepiece(files: list[str], vocab_size: int, output_dir: str,
                        lowercase: bool = False, *, input_format: str = "bert",
                        encoding_errors: str = "strict", model_type: str = "unigram") -> str:
    """Trains a SentencePiece model (sentencepiece.model, vocab.txt); returns the model's path."""
    import sentencepiece
    if file_layer.is_remote(output_dir):
        raise UserError(f"{output_dir}: SentencePiece training writes a local directory; "
                        "train locally, then copy the directory to the bucket")
    os.makedirs(output_dir, exist_ok=True)
    prefix = os.path.join(output_dir, ".sentencepiece-training")
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=_sentences(files, input_format, encoding_errors, lowercase),
            model_prefix=prefix, vocab_size=vocab_size, model_type=model_type,
            pad_id=0, pad_piece="[PAD]", unk_id=1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
            control_symbols=["[CLS]", "[SEP]", "[MASK]"], character_coverage=0.9995,
            hard_vocab_limit=False, num_threads=os.cpu_count() or 1, minloglevel=2)
    except RuntimeError as error:
        raise UserError(f"{files}: SentencePiece training failed ({error})") from None
    model_path = os.path.join(output_dir, SENTENCEPIECE_MODEL)
    os.replace(prefix + ".model", model_path)
    os.remove(prefix + ".vocab")
    processor = sentencepiece.SentencePieceProcessor(model_file=model_path)
    _write_tokens([processor.IdToPiece(i) for i in range(processor.GetPieceSize())],
                  output_dir, lowercase)
    return model_path
