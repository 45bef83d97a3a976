"""Cross-site request forgery protection, rate limits, and the errors they answer with."""
