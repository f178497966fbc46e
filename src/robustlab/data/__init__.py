"""Data: image decoding, sources, label spaces and the embedded demo set."""
