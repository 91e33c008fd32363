"""Sentence embeddings: pooling, sentence-transformers model directories, encoding, search.

`pooling` holds the pure reductions from token vectors to one vector per text (used both by
`bert-jax embed` and by siamese training); `model_directory` reads and writes the files that
say how a model pools; `encoder` runs a model over texts; `search` scores a query against a
corpus of embeddings.
"""
