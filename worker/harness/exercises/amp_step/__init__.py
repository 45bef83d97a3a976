"""`mixed-precision/amp-step`: an autocast + GradScaler training loop (recorder.py)."""

from .recorder import setup

__all__ = ["TRUSTED_PHASES", "setup"]
TRUSTED_PHASES: dict = {}
