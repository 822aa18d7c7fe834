"""The plan: pure numpy decisions made before any byte is read (piles, levels, epochs, orders, scale)."""
