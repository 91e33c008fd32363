"""Training a vocabulary: WordPiece and byte-level BPE through `tokenizers`, SentencePiece
through `sentencepiece`.

All read the same sources as the shard writer (BERT-format or prose files, .gz, globs),
and all put BERT's special tokens [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4.
"""

import os

from bert_jax.storage import files as file_layer
from bert_jax.errors import UserError
from input_pipeline import sources
from input_pipeline.vocabulary_files import SENTENCEPIECE_MODEL, SPECIAL_TOKENS, write_vocabulary


def _sentences(files: list[str], input_format: str, encoding_errors: str, lowercase: bool):
    for document in sources.read_documents(files, input_format, encoding_errors):
        for sentence in document:
            yield sentence.lower() if lowercase else sentence


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
    return write_vocabulary(output_dir, tokens, lowercase)


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
    pieces = [processor.IdToPiece(index) for index in range(processor.GetPieceSize())]
    write_vocabulary(output_dir, pieces, lowercase)
    return model_path


def train_bpe(files: list[str], vocab_size: int, output_dir: str, lowercase: bool = False,
              *, input_format: str = "bert", encoding_errors: str = "strict",
              min_frequency: int = 2) -> str:
    """Trains a byte-level BPE tokenizer.json of ModernBERT's kind on `files`; returns its path.

    As answerdotai/ModernBERT-base's: NFC (then lower-casing, if asked), GPT-2's byte-level
    pre-tokenizer without a prefix space and its decoder, every byte in the alphabet (no
    text is unknown), `[MASK]` taking the space before it, and the template
    `[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]`. tokenizer_config.json names the special
    tokens, so transformers' AutoTokenizer reads the directory to the same ids.
    """
    import tokenizers
    from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers import processors

    from input_pipeline.tokenizer_json import ROLES, TokenizerJson
    from input_pipeline.vocabulary_files import TOKENIZER_JSON

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size <= len(alphabet) + len(SPECIAL_TOKENS):
        raise UserError(f"--size {vocab_size}: a byte-level BPE needs more than its "
                        f"{len(alphabet)} bytes and {len(SPECIAL_TOKENS)} special tokens")
    backend = tokenizers.Tokenizer(models.BPE())
    backend.normalizer = (normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
                          if lowercase else normalizers.NFC())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                     use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet, show_progress=False)
    backend.train_from_iterator(
        _sentences(files, input_format, encoding_errors, lowercase=False), trainer=trainer)
    backend.add_special_tokens([AddedToken("[MASK]", special=True, normalized=False,
                                           lstrip=True)])
    cls_id, sep_id = SPECIAL_TOKENS.index("[CLS]"), SPECIAL_TOKENS.index("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    path = file_layer.join(output_dir, TOKENIZER_JSON)
    names = dict(zip(ROLES, SPECIAL_TOKENS))
    TokenizerJson(backend.to_str(), path, names, {}).save(output_dir)
    return path
