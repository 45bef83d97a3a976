"""Accounts: register, log in (bearer token and session cookie), log out; adopting the
anonymous learner's work when they sign in."""
