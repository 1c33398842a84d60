"""Data helpers for the plugin (plain Python): the embedded synthetic parallel corpus."""
