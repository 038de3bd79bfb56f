"""The scenario format, loading it (presets, --set, config.json) and writing it back."""
