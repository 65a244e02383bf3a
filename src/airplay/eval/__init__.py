"""Closed-loop metrics, aggregation, results files and plots (DESIGN.md section 6)."""
