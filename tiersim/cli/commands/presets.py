"""`tiersim presets`: the shipped model and hardware presets, with their key figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim.cli.commands.common import add_format_arg
from tiersim.config.presets import DEFAULT_HARDWARE, load_preset, preset_names
from tiersim.core.units import fmt_bytes, fmt_count, fmt_rate

if TYPE_CHECKING:  # annotations only: the heavy modules load when a command runs
    from tiersim.config.schema import Hardware

HERE = Path(".")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "presets",
        help="list the shipped model and hardware presets with their key figures",
        description="List the model presets (model.preset: NAME) with their exact parameter "
        "counts and shapes, and the hardware presets (hardware.preset: NAME) with their GPU, "
        "memory tiers and links. Any key of a preset can be overridden in a scenario.",
    )
    add_format_arg(parser)
    parser.set_defaults(handler=run)


def model_presets() -> dict[str, dict[str, Any]]:
    from tiersim.api import model_facts
    from tiersim.config.load import build

    out = {}
    for name in preset_names("models"):
        loaded = build({"name": "preset", "model": {"preset": name}}, HERE, f"preset {name}")
        out[name] = model_facts(loaded)
    return out


def hardware_presets() -> dict[str, dict[str, Any]]:
    from tiersim.config.load import build

    out = {}
    for name in preset_names("hardware"):
        raw = {"name": "preset", "model": {"preset": "gpt2"}, "hardware": {"preset": name}}
        if "bf16" not in load_preset("hardware", name)["gpu"]["peak_flops"]:  # V100: fp16
            half = {"weights": "fp16", "gradients": "fp16"}
            raw["training"] = {"precision": half}
        out[name] = _hardware(build(raw, HERE, f"preset {name}").scenario.hardware)
    return out


def _hardware(hw: Hardware) -> dict[str, Any]:
    return {
        "gpu": hw.gpu.name,
        "peak_flops": dict(hw.gpu.peak_flops),
        "efficiency": hw.gpu.efficiency,
        "kernels": hw.gpu.kernels,  # the measured kernel table GEMMs are timed from, if any
        "cpu_optimizer_rate": hw.cpu.optimizer_rate,
        "cpu_adam_kernel_rate": hw.cpu.adam_kernel_rate,  # None: cpu.optimizer_rate's
        "tiers": {
            n: {
                "kind": t.kind,
                "capacity_bytes": t.capacity,
                "read_bandwidth": t.read_bw,
                "write_bandwidth": t.write_bw,
            }
            for n, t in hw.tiers.items()
        },
        "links": {
            n: {"between": list(k.between), "bandwidth": k.bandwidth} for n, k in hw.links.items()
        },
        "intra_node_bandwidth": hw.network.intra_node_bandwidth,
        "inter_node_bandwidth": hw.network.inter_node_bandwidth,
    }


def run(args: argparse.Namespace) -> int:
    models, hardware = model_presets(), hardware_presets()
    if args.format == "json":
        print(json.dumps({"models": models, "hardware": hardware}, indent=2))
        return 0
    print(_model_table(models))
    print()
    print(_hardware_table(hardware))
    return 0


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate / 1e9:.3g} Gparam/s"


def _model_table(models: dict[str, dict[str, Any]]) -> str:
    from tiersim.report.table import render

    rows = [
        [
            name,
            f"{fmt_count(m['parameters'])} ({m['parameters']:,})",
            fmt_count(m["active_parameters"]) if "experts" in m else "all",
            m["layers"],
            m.get("hidden", "-"),
            m.get("heads", "-"),
            m.get("kv_heads", "-"),
            # ffn_hidden is the dense layers' width: none where every layer has experts
            m.get("ffn_hidden", "-") if m.get("moe_layers") != m["layers"] else "-",
            _experts(m),
            m.get("expert_ffn_hidden", "-"),
            m.get("vocab", "-"),
            m["max_positions"] or "-",
        ]
        for name, m in models.items()
    ]
    header = ["model preset", "parameters", "active", "layers", "hidden", "heads", "kv heads"]
    header += ["dense ffn", "experts", "expert ffn", "vocab", "max positions"]
    notes = (
        "active: the parameters one token uses (a mixture of experts: its experts', not all);\n"
        "dense ffn: the MLP width of the layers without experts; expert ffn: a routed expert's."
    )
    return render(header, rows, "Model presets (model.preset):") + "\n" + notes


def _experts(m: dict[str, Any]) -> str:
    """'8 x top-2' (routed experts, those a token goes to), '+ 1 shared' (always used)."""
    if "experts" not in m:
        return "-"
    shared = m.get("shared_experts", 0)
    return f"{m['experts']} x top-{m['experts_per_token']}" + (f" + {shared} shared" * bool(shared))


def _hardware_table(hardware: dict[str, dict[str, Any]]) -> str:
    from tiersim.report.table import render

    gpus, tiers, links = [], [], []
    for name, h in hardware.items():
        # bf16 where the GPU has it; a V100 has fp16 tensor cores only
        kind = next((k for k in ("bf16", "fp16") if h["peak_flops"].get(k)), None)
        peak = f"{h['peak_flops'][kind] / 1e12:,.0f} TFLOP/s {kind}" if kind else "-"
        fp8 = h["peak_flops"].get("fp8")  # what training.fp8 needs (A100, V100: none)
        gpus.append(
            [
                name,
                h["gpu"],
                peak,
                f"{fp8 / 1e12:,.0f} TFLOP/s" if fp8 else "-",
                f"{h['efficiency']:g}",
                h["kernels"] or "-",
                _rate(h["cpu_optimizer_rate"]),
                _rate(h["cpu_adam_kernel_rate"]),
                fmt_rate(h["intra_node_bandwidth"]),
                fmt_rate(h["inter_node_bandwidth"]),
            ]
        )
        for tier, t in h["tiers"].items():
            read, write = fmt_rate(t["read_bandwidth"]), fmt_rate(t["write_bandwidth"])
            tiers.append([name, tier, t["kind"], fmt_bytes(t["capacity_bytes"]), read, write])
        for link, k in h["links"].items():
            links.append([name, link, " - ".join(k["between"]), fmt_rate(k["bandwidth"])])
    # the CPU rates by their preset keys: optimizer_rate the update without a framework,
    # adam_kernel_rate DeepSpeed's CPU-Adam kernel (its path's other parts timed apart)
    head = ["hardware preset", "GPU", "16-bit peak", "FP8 peak", "efficiency", "gpu.kernels"]
    head += ["cpu.optimizer_rate", "cpu.adam_kernel_rate"]
    head += ["in node/dir", "across nodes/dir"]  # the network: run's `nvlink` link, then NICs
    title = (
        f"Hardware presets (hardware.preset; a scenario naming none runs on {DEFAULT_HARDWARE}), "
        "as one GPU sees its node:"
    )
    rates = (
        "cpu.optimizer_rate: the CPU update without a framework;\n"
        "cpu.adam_kernel_rate: DeepSpeed's CPU-Adam kernel (training.framework: deepspeed), "
        "- where it is cpu.optimizer_rate."
    )
    return "\n\n".join(
        [
            render(head, gpus, title) + "\n" + rates,
            render(["hardware preset", "tier", "kind", "capacity", "read", "write"], tiers),
            render(["hardware preset", "link", "between", "bandwidth/dir"], links),
        ]
    )
