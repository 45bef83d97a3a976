"""Submissions: what the API takes and answers (schemas) and the one way to make them
(service)."""
