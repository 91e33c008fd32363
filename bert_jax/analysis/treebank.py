"""The probe and the head statistics over a whole treebank, streamed in batches."""

import dataclasses
import time
from collections.abc import Iterable

from bert_jax.analysis.attention_maps import sentence_attention
from bert_jax.analysis.probe import ProbeCounts, ProbeResult
from bert_jax.analysis.statistics import StatisticsAccumulator
from bert_jax.analysis.word_attention import word_attention
from bert_jax.models.config import BertConfig


@dataclasses.dataclass
class TreebankProbe:
    result: ProbeResult
    statistics: dict  # see statistics.StatisticsAccumulator.result
    sentences: int  # probed
    skipped: int  # longer than max_seq_len word pieces
    seconds: float  # wall time of the whole pass (model, conversion and scoring)


def probe_treebank(config: BertConfig, params: dict, tokenizer, sentences: Iterable,
                   max_seq_len: int = 128, batch_size: int = 32, total: int | None = None,
                   progress: bool = True) -> TreebankProbe:
    """Runs the probe over `sentences` (`conllu.Sentence`s: words, heads, relations).

    `total` (the number of sentences, if known) sizes the progress bar.
    """
    from tqdm import tqdm

    counts = ProbeCounts(config.num_layers, config.num_heads)
    statistics = StatisticsAccumulator(config.num_layers, config.num_heads)
    skipped = []
    start = time.perf_counter()
    with tqdm(total=total, unit="sentence", desc="probe", disable=not progress) as bar:
        def on_skip(sentence, length):
            skipped.append(length)
            bar.update(1)

        pairs = ((sentence, sentence.words) for sentence in sentences)
        probed = 0
        for entry in sentence_attention(config, params, tokenizer, pairs, max_seq_len,
                                        batch_size, on_skip):
            sentence = entry.item
            counts.add(sentence.words, sentence.heads, sentence.relations,
                       word_attention(entry.attention, entry.word_ids))
            statistics.add(entry.attention, entry.tokens)
            probed += 1
            bar.update(1)
    return TreebankProbe(counts.result(), statistics.result(), probed, len(skipped),
                         time.perf_counter() - start)
