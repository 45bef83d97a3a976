"""The gradlab web application: pages, REST API, content serving, queue writes. Never imports
torch: grading happens in `worker`, reached only through the database."""
