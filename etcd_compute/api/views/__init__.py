"""How resources look at a microversion (Nova's fields)."""
