"""The pre-training objective's keys, checked together when a run config is loaded.

`objective` (one of ranges.CHOICES) is mlm_nsp (BERT: masked LM + next sentence, on create-data's pre-masked pairs)
or mlm (masked LM only, as ModernBERT trains: create-data --objective mlm's rows, masks
drawn when rows are read at `data.masking_rate` and `data.masking_rate_schedule`). Keys
that belong to the other objective are refused by name rather than ignored.
"""

from bert_jax.errors import UserError
from input_pipeline.masking_schedule import parse_schedule


def check_objective(config, source: str) -> None:
    """Raises `UserError` for a malformed rate or schedule, or a key the objective does not
    use."""
    objective, data = config.objective, config.data
    parse_schedule(data.masking_rate, data.masking_rate_schedule, source)
    if objective == "mlm_nsp" and data.masking_rate_schedule:
        raise UserError(f"{source}: data.masking_rate_schedule needs objective mlm: mlm_nsp's "
                        "masks are the shards' (or data.dynamic_masking's, at one rate)")
    if objective == "mlm" and data.dynamic_masking:
        raise UserError(f"{source}: data.dynamic_masking is for objective mlm_nsp's pre-masked "
                        "shards; objective mlm always draws its masks when rows are read")
