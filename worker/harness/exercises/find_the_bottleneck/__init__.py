"""`profiling/find-the-bottleneck`: name the planted bottleneck, fix it, be faster (recorder.py)."""

from .recorder import baseline, setup

__all__ = ["TRUSTED_PHASES", "setup"]
TRUSTED_PHASES = {"baseline": baseline}
