"""Grading: metrics, submission validation, medals and reports (MLE-bench's rules)."""
