"""HEFT (being written)."""
