"""A bert-jax embedding model as an MTEB encoder, so `mteb.evaluate(model, tasks)` runs any MTEB
task on it (mteb 2.x; `pip install mteb`, which brings torch: it is not a bert-jax dependency).

mteb 2's interface for an encoder is `mteb.models.EncoderProtocol`: `encode(inputs, *,
task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs)` over a torch DataLoader of
batches (dicts whose "text" holds the texts: a retrieval document's title and text already
joined by mteb, as BEIR joins them), returning (N, D) embeddings; `similarity` and
`similarity_pairwise`; and `mteb_model_meta`. `AbsEncoder`, which mteb's own
sentence-transformers wrapper subclasses, gives the similarities from the metadata's
`similarity_fn_name` (cosine here: every bert-jax embedding is compared by its cosine); this
class adds `encode` through the embedding code `bert-jax embed` runs, so a model embeds for
MTEB exactly as for `embed`, `search` and `retrieval` (its own pooling, normalisation and
maximum length). Prompts are not applied: bert-jax models have none (`read_settings` refuses
a directory with a default prompt).
"""

import numpy as np
from mteb.models import ModelMeta
from mteb.models.abs_encoder import AbsEncoder

from bert_jax.embeddings.encoder import embed_texts, load_embedding_model

# mteb requires an "organisation/name" model name; results are filed under it.
DEFAULT_NAME = "bert-jax/local-model"


class MtebEncoder(AbsEncoder):
    """`MtebEncoder(model)`: the embedding model at `model` (any path `bert-jax embed
    --model` takes) for `mteb.evaluate`; `name` is how mteb files its results."""

    def __init__(self, model, name: str = DEFAULT_NAME, revision: str | None = None,
                 batch_size: int = 32, max_seq_len: int | None = None) -> None:
        self.model = load_embedding_model(model, max_seq_len=max_seq_len)
        self.batch_size = batch_size
        # Every field mteb requires; those a local model cannot know are None.
        self.mteb_model_meta = ModelMeta(
            loader=None, name=name, revision=revision or self.model.fingerprint()[:12],
            release_date=None, languages=None, n_parameters=None, memory_usage_mb=None,
            max_tokens=self.model.settings.max_seq_len, embed_dim=self.model.dimension,
            license=None, open_weights=None, public_training_code=None,
            public_training_data=None, framework=["JAX"], similarity_fn_name="cosine",
            use_instructions=False, training_datasets=None)

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str,
               prompt_type=None, **kwargs) -> np.ndarray:
        """(N, D) float32 embeddings of the texts of `inputs`' batches, in their order."""
        texts = [text for batch in inputs for text in batch["text"]]
        return embed_texts(self.model, texts, kwargs.get("batch_size", self.batch_size),
                           progress=kwargs.get("show_progress_bar", False))
