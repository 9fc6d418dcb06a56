"""Baseline placements (being written)."""
