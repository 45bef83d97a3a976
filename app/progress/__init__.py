"""A learner's progress through the course, synced across devices."""
