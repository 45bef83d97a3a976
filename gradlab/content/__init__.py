"""Course content: YAML schema, loading with file:line errors, per-locale views with fallback."""
