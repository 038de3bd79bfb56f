"""Units, errors and interval arithmetic: what every layer uses."""
