"""JSON that every reader accepts: a NaN or infinite number is written as null.

Python's json module writes float("nan") as a bare `NaN`, which is not JSON (RFC 8259):
jq, JavaScript's JSON.parse and most other readers reject the whole file. A value can be
NaN legitimately (the Pearson correlation of constant predictions), so every JSON output of
bert-jax (predictions, metrics, reports) goes through here: non-finite numbers become null,
numpy scalars and arrays become Python values, and `allow_nan=False` makes anything this
misses fail loudly instead of writing invalid JSON.
"""

import json
import math

import numpy as np


def finite(value):
    """`value` with every NaN or infinite float replaced by None, numpy values as Python's."""
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    if isinstance(value, np.ndarray):
        return finite(value.tolist())
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def dumps(value, **options) -> str:
    """json.dumps of `finite(value)`; `options` as json.dumps takes them."""
    return json.dumps(finite(value), allow_nan=False, **options)


def dump(value, file, **options) -> None:
    """json.dump of `finite(value)` into the open text `file`."""
    json.dump(finite(value), file, allow_nan=False, **options)
