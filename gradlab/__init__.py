"""gradlab: the shared core (settings, database, queue, content, result contract).

Imports neither FastAPI nor torch: `app` (the web) and `worker` (the grader) both build on it.
"""
