"""The model's shape and the exact bytes of every state class."""
