"""One package per exercise (or family of exercises sharing a problem), each with `EXERCISES`."""
