"""Other frameworks' own configuration files, read into a scenario and written back.

`tiersim import` reads a DeepSpeed JSON config, a Megatron-LM argument list (or a
Megatron-Bridge YAML) or a torchtitan TOML (frameworks/detect.py tells which from the content),
maps each key onto the scenario format (frameworks/deepspeed.py, megatron.py, torchtitan.py),
and names every key it cannot map in a note. `tiersim plan --emit` writes a scenario back in a
framework's format (frameworks/emit.py).
"""

KINDS = ("deepspeed", "megatron", "torchtitan")
