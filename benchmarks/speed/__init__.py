"""How long a step, a layer or a whole run takes, and what it is made of (operators)."""
