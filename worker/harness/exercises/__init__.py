"""One package per exercise (or family of exercises sharing a problem): `setup(scenario, ctx)`
for the learner's phase and `TRUSTED_PHASES` for the phases with no learner code."""
