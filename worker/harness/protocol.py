"""Wire format of the observations: one safetensors blob (tensors + a JSON string as metadata).

safetensors holds only raw numbers and a JSON header, so parsing it executes nothing; pickle
is never used anywhere on this path.
"""

import json
from typing import Any

OBSERVATIONS_META_KEY = "gradlab"
OBSERVATIONS_VERSION = 1
# Written before the learner's code starts: without it, a failure is the platform's, not theirs.
READY_MARKER = b"GRADLAB-READY\n"


def encode(tensors: dict[str, Any], meta: dict[str, Any]) -> bytes:
    from safetensors.torch import save

    payload = {"version": OBSERVATIONS_VERSION, **meta}
    return save(
        {name: t.contiguous() for name, t in tensors.items()},
        metadata={OBSERVATIONS_META_KEY: json.dumps(payload)},
    )
