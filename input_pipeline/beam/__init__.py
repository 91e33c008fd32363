"""The shard writer on Apache Beam (`bert-jax create-data --runner beam`), an optional extra.

Beam is imported only here, only when asked for, so the rest of bert-jax never needs it.
"""

from bert_jax.errors import UserError

INSTALL_HINT = ("--runner beam needs Apache Beam, an optional extra: pip install 'bert-jax[beam]' "
                "(or pip install -r requirements-beam.txt)")


def create_pretraining_data_beam(input_patterns: list[str], vocab_path: str, output_dir: str,
                                 **options) -> dict:
    """`create_data.create_pretraining_data` as a Beam pipeline; the same shards and manifest.

    Takes the local writer's keyword options (less `show_progress`) plus `beam_options`, a
    string of Beam pipeline options (default: the DirectRunner, one process per worker).
    """
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    from input_pipeline.beam import pipeline
    return pipeline.create_pretraining_data(input_patterns, vocab_path, output_dir, **options)
