"""Writes a sentence-transformers directory: a Hugging Face encoder (`BertModel` or
`ModernBertModel`) plus its pooling files.

`sentence_transformers.SentenceTransformer(directory)` loads the result, and its `encode`
gives what `bert-jax embed --model SOURCE` gives (the pooling, normalisation and maximum
length travel in modules.json, 1_Pooling/config.json and sentence_bert_config.json).
"""

from bert_jax.embeddings.encoder import load_embedding_model
from bert_jax.embeddings.model_directory import write_settings
from bert_jax.interop import huggingface, model_writers
from bert_jax.models.families import family_of


def export(source, destination: str, overwrite: bool = False) -> str:
    """Converts the model at `source` (a path or `ModelSource` of any directory `bert-jax
    embed` reads); returns a summary of the pooling written."""
    model = load_embedding_model(source)
    settings = model.settings

    def add_pooling_files(directory: str) -> None:
        write_settings(directory, settings, model.config.hidden_dim)

    # The encoder-only class (BertModel: encoder and pooler) is the layout sentence-transformers
    # loads through AutoModel with no missing or unexpected keys.
    params = {family_of(model.config).encoder_key: model.params}
    model_writers.export_huggingface(model.config, params, model.tokenizer, destination,
                                     huggingface.encoder_architecture(model.config), overwrite,
                                     extra_files=add_pooling_files)
    return settings.describe()
