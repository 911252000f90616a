"""Measurements taken beside or after training, one module each, registered in registry.py."""
