"""A ModernBERT-like `tokenizer.json` directory, made in a test (there is no Hub here).

Not a test module (no `test_` prefix): the tokenizer tests and the ModernBERT model tests
import it. `write_modernbert_tokenizer(directory)` trains a small byte-level BPE with
`tokenizers` and writes the three files answerdotai/ModernBERT-base ships, in the layout
transformers 4.x's `save_pretrained` wrote them (the Hub's copy):

  tokenizer.json           NFC normaliser; ByteLevel pre-tokenizer (add_prefix_space false,
                           trim_offsets true) and decoder; BPE without an unknown token;
                           TemplateProcessing `[CLS] $A [SEP]` / `[CLS] $A [SEP] $B [SEP]`;
                           added tokens: special `<|padding|>` `<|endoftext|>`, plain
                           `|||IP_ADDRESS|||` and runs of spaces (normalized), then the special
                           [UNK] [CLS] [SEP] [PAD] [MASK] (lstrip: "a [MASK]" takes the space)
                           and [unused0] [unused1]
  tokenizer_config.json    added_tokens_decoder, the five special token names,
                           model_max_length 8192, tokenizer_class PreTrainedTokenizerFast
  special_tokens_map.json  the five, [MASK] with lstrip true

ModernBERT's real vocabulary has 50,368 ids (50,280 BPE pieces, then 88 added tokens: the five
at 50280-50284 and [unused0..82]); this one has `vocab_size` BPE pieces and the same order.
"""

import json
import os

# Text the BPE is trained on: English, accents, CJK, punctuation, digits, odd whitespace.
TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "A masked language model predicts the words that were hidden from it.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "Héllo, Wörld! Crème brûlée costs $3.50 (or €4) at the café.",
    "Naïve façade: résumé—coöperate; «quoted» “curly” 'single'.",
    "中文字符分开 and 日本語のテキスト, 한국어 too.",
    "def encode(text):\n    return tokenizer(text)  # four spaces of indentation",
    "Numbers like 1234567 and 3.14159 are split into pieces; dates like 2024-12-18 too.",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
]
SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")
_ROLES = ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token")


def _added_token_entry(token) -> dict:
    return dict(content=token.content, lstrip=token.lstrip, normalized=token.normalized,
                rstrip=token.rstrip, single_word=token.single_word, special=token.special)


def build_backend(vocab_size: int = 600):
    """The `tokenizers.Tokenizer` of a ModernBERT-like byte-level BPE (see the module doc)."""
    import tokenizers
    from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers

    backend = tokenizers.Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                     use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|padding|>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(TRAINING_TEXT * 4, trainer=trainer)
    backend.add_tokens([AddedToken(text, normalized=True, special=False)
                        for text in ("|||IP_ADDRESS|||", "    ", "  ")])
    backend.add_special_tokens(
        [AddedToken(token, special=True, normalized=False, lstrip=token == "[MASK]")
         for token in SPECIAL_TOKENS + ("[unused0]", "[unused1]")])
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return backend


def write_modernbert_tokenizer(directory: str, vocab_size: int = 600) -> str:
    """Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json (as the Hub's
    ModernBERT has them) into `directory` (created if needed); returns `directory`."""
    backend = build_backend(vocab_size)
    os.makedirs(directory, exist_ok=True)
    backend.save(os.path.join(directory, "tokenizer.json"))
    added = backend.get_added_tokens_decoder()  # id -> AddedToken
    names = dict(zip(_ROLES, SPECIAL_TOKENS))
    config = dict(
        added_tokens_decoder={str(index): _added_token_entry(token)
                              for index, token in sorted(added.items())},
        clean_up_tokenization_spaces=True, **names,
        model_input_names=["input_ids", "attention_mask"], model_max_length=8192,
        tokenizer_class="PreTrainedTokenizerFast")
    by_content = {token.content: token for token in added.values()}
    special_map = {role: {key: value for key, value in _added_token_entry(by_content[name])
                          .items() if key != "special"} for role, name in names.items()}
    for name, values in (("tokenizer_config.json", config),
                         ("special_tokens_map.json", special_map)):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as file:
            json.dump(values, file, indent=2, ensure_ascii=False)
    return directory


# Llama 3's pre-tokenizer pattern (EuroBERT's tokenizer.json splits with it, then maps bytes).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
EUROBERT_SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|mask|>", "<|reserved_0|>")


def build_eurobert_backend(vocab_size: int = 600):
    """The `tokenizers.Tokenizer` of a EuroBERT-like (Llama-3-style) byte-level BPE: no
    normaliser; Split(Llama 3's pattern) then ByteLevel without its own regex; BPE without
    an unknown token (ignore_merges, as Llama 3's); special BOS, EOS, <|mask|> and a reserved
    token after the pieces; the template `BOS $A EOS` / `BOS $A EOS $B EOS`."""
    import tokenizers
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
    from tokenizers import trainers

    backend = tokenizers.Tokenizer(models.BPE(ignore_merges=True))
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(TRAINING_TEXT * 4, trainer=trainer)
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                for token in EUROBERT_SPECIAL])
    bos, eos = EUROBERT_SPECIAL[:2]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0 {eos}:0", pair=f"{bos}:0 $A:0 {eos}:0 $B:1 {eos}:1",
        special_tokens=[(bos, backend.token_to_id(bos)), (eos, backend.token_to_id(eos))])
    return backend


def write_eurobert_tokenizer(directory: str, vocab_size: int = 600) -> str:
    """Writes tokenizer.json and tokenizer_config.json as EuroBERT's name their roles (BOS,
    EOS, pad = EOS, <|mask|>; no [CLS], [SEP] or [UNK]) into `directory`; returns it."""
    backend = build_eurobert_backend(vocab_size)
    os.makedirs(directory, exist_ok=True)
    backend.save(os.path.join(directory, "tokenizer.json"))
    added = backend.get_added_tokens_decoder()
    bos, eos, mask = EUROBERT_SPECIAL[:3]
    config = dict(
        added_tokens_decoder={str(index): _added_token_entry(token)
                              for index, token in sorted(added.items())},
        bos_token=bos, eos_token=eos, pad_token=eos, mask_token=mask,
        clean_up_tokenization_spaces=False, model_max_length=8192,
        model_input_names=["input_ids", "attention_mask"],
        tokenizer_class="PreTrainedTokenizerFast")
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as file:
        json.dump(config, file, indent=2, ensure_ascii=False)
    return directory
