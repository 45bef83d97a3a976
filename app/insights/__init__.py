"""Class insight for instructors and graders: per exercise, lesson, locale and period, counts
only (never who)."""
