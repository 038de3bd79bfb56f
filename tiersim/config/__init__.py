"""The scenario format, loading it (presets, --set, config.json) and writing it back."""

DEFAULT_HARDWARE = "h200-hbf"  # the hardware preset of a scenario that names none
