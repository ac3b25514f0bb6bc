"""Plain nn.Modules behind typed contracts (``base``): next-item and CTR families, shared layers (``layers``)."""
