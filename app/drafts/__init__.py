"""The exercise editor's autosaved drafts, per owner and exercise."""
