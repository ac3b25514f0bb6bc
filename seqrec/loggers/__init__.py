"""loggers."""
