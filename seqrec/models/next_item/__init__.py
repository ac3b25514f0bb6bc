"""next_item."""
