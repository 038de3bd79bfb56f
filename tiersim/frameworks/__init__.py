"""Other frameworks' own configuration files, read into a scenario and written back.

`tiersim import` reads a DeepSpeed JSON config, a Megatron-LM argument list (or a
Megatron-Bridge YAML), a torchtitan TOML or an Accelerate config YAML (frameworks/detect.py
tells which from the content), maps each key onto the scenario format (frameworks/deepspeed.py,
megatron.py, torchtitan.py, accelerate.py), and names every key it cannot map in a note.
`tiersim plan --emit` writes a scenario back in a framework's format (frameworks/emit.py): all
but Accelerate's.
"""

KINDS = ("deepspeed", "megatron", "torchtitan")  # read and written (--emit)
IMPORT_KINDS = (*KINDS, "accelerate")  # read only: an Accelerate config YAML
