"""Every problem a user's input can have, by a stable code: shown at the end of each message
(`scenario.yaml: training.foo: unknown key 'foo' (...) [E-KEY-UNKNOWN]`), listed in
docs/problem-codes.md (generated from this table: `python -m tiersim.cli.reference`).

A code names the kind of problem, the key path names where: together they say what a test,
a script reading tiersim's output or a user searching the docs needs, while the prose around
them may be reworded. A code, once shipped, keeps its meaning; a new kind of problem gets a
new code. `E-` codes refuse the input (exit 2); `W-` codes are notes beside a result (what a
framework config says that tiersim leaves out or maps approximately), never an error.
"""

from __future__ import annotations

# code -> what it means (one line, the docs page's); grouped by where the input comes from
CODES: dict[str, str] = {
    # a file, before its content
    "E-FILE": "a file cannot be read: missing, a folder, unreadable, too large or not UTF-8",
    "E-YAML": "a file is not YAML (or TOML) tiersim can read: a syntax error, empty, nested "
    "too deeply, or not a mapping at its top level",
    # a scenario's keys and values (the schema)
    "E-KEY-UNKNOWN": "a key the section does not have (a typo, most often: the message "
    "suggests the closest key)",
    "E-KEY-MISSING": "a required key is missing",
    "E-TYPE": "a value of the wrong type: text for a number, a number for a list, ...",
    "E-RANGE": "a number outside the values the key takes (a count of 0, a negative size)",
    "E-CHOICE": "a word the key does not take (one of a listed few is expected)",
    "E-NULL": "a section written with nothing under it (null in YAML)",
    "E-NAME": "a run's or sweep's name that cannot name a results folder",
    "E-VALUE": "a value the key's own check refuses (a unit that does not parse, a list "
    "out of order, ...)",
    "E-TIER-UNKNOWN": "a tier named that the machine does not have",
    "E-PRESET": "a preset or model source that cannot be used: unknown, or given twice",
    "E-SET": "a --set override that cannot be applied, or that names a key close to another",
    # a scenario's keys against each other
    "E-CONFLICT": "keys that contradict each other (a setting the rest of the scenario rules out)",
    "E-PLACEMENT": "a class of state placed on a tier that cannot hold it for this scenario",
    "E-LAYOUT": "a parallel layout that does not divide the model, the sequence, the batch or "
    "the experts",
    "E-KERNEL": "a kernel setting (fp8, compile) the GPU or the rest of the scenario rules out",
    "E-ROUTE": "a movement the machine has no link for",
    "E-LIMIT": "an environment variable bounding tiersim's input that is not a valid bound",
    "E-WEAR": "wear or checkpoint inputs that are missing or contradict each other",
    # a sweep or a plan
    "E-SWEEP": "a sweep file that is not a valid sweep (its keys, its axes, its base)",
    "E-SWEEP-POINT": "points of a sweep that are not valid scenarios",
    "E-SWEEP-DUPLICATE": "sweep points that are the same scenario",
    "E-PLAN": "a plan: section, or a plan's search, that is not valid",
    "E-EXECUTOR": "a sweep executor that cannot be used (Dask missing, no scheduler)",
    # the command line and its files
    "E-OPTION": "a command-line option's value that cannot be used",
    "E-RESULTS": "a results folder or output path that cannot be read or written",
    "E-PUBLISHED": "check-published's reference file or folder is not valid",
    "E-MEASURE": "what `tiersim measure` or `tiersim calibrate` is asked to do cannot be done "
    "here (PyTorch missing, a model too large, a device absent)",
    # a framework's config (tiersim import)
    "E-IMPORT-FILE": "a framework config that cannot be read or recognised",
    "E-IMPORT-VALUE": "a framework config's value that is not valid",
    "E-IMPORT-CONFLICT": "framework configs, or a config and the command line, that disagree",
    "E-IMPORT-MISSING": "framework configs that do not give what a scenario needs (no model: "
    "--hf-config or --set model.preset gives one)",
    "W-IMPORT-REPLACED": "a value given twice (two framework configs, or a config and a "
    "command-line option): the later one is taken",
    "W-IMPORT-ASSUMED": "a value the framework configs leave out, taken as a default, or a "
    "setting mapped with an assumption the note says (padded, read from another source)",
    "W-IMPORT-UNMAPPED": "a framework setting tiersim has no key for, or does not yet model "
    "(left out of the scenario)",
    "W-SET-REPEATED": "a key given more than once by --set: the last value is used",
    "W-SET-REPLACES": "a --set whose value, a mapping, replaces a whole mapping of the file: "
    "the keys it leaves out take their defaults",
    "W-NO-EFFECT": "a setting that changes nothing for this scenario (noted beside the result)",
    "W-DEFAULT": "a default the model took that a model of its kind usually sets otherwise",
    "W-HARDWARE-DEFAULT": "no hardware.preset given: the scenario runs on the default machine "
    "(h200-hbf, whose HBF tier's write bandwidth and endurance are assumptions)",
    "W-MODEL-LIMIT": "a setting past what the model was built for (a sequence longer than its "
    "max_positions, with rotary positions): counted, not refused",
    "W-UNMEASURED": "a combination the implementation tiersim follows refused where tiersim "
    "measured it, or never ran: counted by that implementation's source, unchecked",
    "W-FRAMEWORK-LIMIT": "a combination the framework named runs otherwise than tiersim counts, "
    "or only with a setting tiersim has no key for: the note says what the figures are (one "
    "the framework refuses outright is an E-CONFLICT)",
    "W-EMIT-APPROXIMATE": "a scenario setting the framework written for has no exact "
    "counterpart for (written approximately, or left out)",
    "W-GPU-COUNT": "failures.gpus differs from the GPUs the parallel layout runs: the job's "
    "MTBF is gpu_mtbf over the count given",
    "W-MEASURE-INSTEAD": "a scenario setting `tiersim measure --scenario` cannot run on the "
    "CPU (a parallel split, FP8, an offload, a GPU-only kernel, a precision mix): the note "
    "says what is measured instead",
    "W-SLOW-BF16": "`tiersim measure` in bf16 on a CPU whose bf16 matrix multiplies run in "
    "PyTorch's reference kernel (timed before training): hours, not minutes",
    "W-ONE-PRICE": "one hardware.price_per_gpu_hour for different GPUs (a cost plan over "
    "machines, a compare of two): their GPU-hours are priced alike",
    # a run's result
    "W-STEP-UNSETTLED": "a step reported whose steps were not seen to settle: the runs "
    "measuring the steps after it reached their bound, or simulation.max_layer_passes, still "
    "changing or before a step after it could be compared, so the step is not known to be "
    "the steady state's (sim.settled false, the report's sim.measured_steps_why)",
}


def reference_page() -> str:
    """docs/problem-codes.md: every code with what it means."""
    lines = [
        "# Problem codes",
        "",
        "<!-- generated from tiersim/core/problem_codes.py by `python -m tiersim.cli.reference`;"
        " do not edit -->",
        "",
        "Every message about a problem with tiersim's input ends with a code in brackets, after",
        "the file and the key path it names: `scenario.yaml: training.foo: unknown key 'foo' "
        "(...) [E-KEY-UNKNOWN]`.",
        "The code names the kind of problem and stays the same when the message's words change;",
        "`E-` codes refuse the input (exit status 2), `W-` codes are notes beside a result.",
        "",
        "| code | what it means |",
        "| --- | --- |",
    ]
    lines += [f"| `{code}` | {text} |" for code, text in CODES.items()]
    return "\n".join(lines) + "\n"
