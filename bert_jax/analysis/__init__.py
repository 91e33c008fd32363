"""Attention analysis: maps, an interactive head view, and the probe of Clark et al. (2019).

  attention_maps    run a model and collect every layer's attention (one text, or a treebank)
  word_attention    word-piece attention -> word attention (sum to a word, mean from a word)
  probe             each head as a dependency classifier; fixed-offset baselines
  statistics        per head: entropy, attention to [CLS], [SEP], punctuation and itself
  figures           matplotlib figures of all of the above
  head_view         a self-contained HTML page with a bertviz-style head view
  probe_report      the probe's report.json and report.md

Every function takes values and returns numpy arrays, matplotlib figures or strings, so
they serve a notebook as well as `bert-jax attention` and `bert-jax probe`.
"""
