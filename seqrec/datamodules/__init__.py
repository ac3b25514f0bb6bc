"""datamodules."""
