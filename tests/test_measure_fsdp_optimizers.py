"""`tiersim measure --fsdp N` and its optimizers, as a user meets them: the help names every
optimizer --fsdp steps, and a refusal names where the refused one runs."""

from tiersim.state.optimizers import fsdp2_stepped


def _fsdp_help(capsys) -> str:
    """--fsdp's paragraph of `tiersim measure --help`, on one line."""
    import pytest

    from tiersim.cli import main

    with pytest.raises(SystemExit):
        main(["measure", "--help"])
    out = capsys.readouterr().out
    block = out[out.index("  --fsdp N") : out.index("  --calibrate")]
    return " ".join(block.split())


def test_fsdp_help_names_every_optimizer_transformers_model_steps(capsys):
    """--fsdp with --implementation huggingface steps adamw, adam, muon and adamw8bit (torchao's:
    in bf16 on each rank's local shards, its DTensor step refusing 16-bit DTensors); its help
    said 'AdamW, Adam or Muon', then 'the last with --dtype fp32'."""
    text = _fsdp_help(capsys)
    words = text.replace(",", " ").replace("(", " ").replace(")", " ").split()
    for name in ("adamw", "adam", "muon", "adamw8bit"):
        assert name in words, (name, text)
    assert fsdp2_stepped() == ("adamw", "adam", "muon", "adamw8bit")  # as its messages list them
    assert "in bf16 stepping each rank's local shards" in text


def test_fsdp_with_tiersims_modules_refuses_8bit_adamw_naming_huggingface(capsys):
    """`measure --fsdp 2 --optimizer adamw8bit --dtype fp32` (tiersim's own modules, --fsdp's
    default) exits 2 and says which implementation steps it, as it does for muon."""
    from tiersim.cli import main

    args = ["measure", "--model", "llama-2-7b", "--fsdp", "2", "--dtype", "fp32"]
    assert main([*args, "--optimizer", "adamw8bit"]) == 2
    err = capsys.readouterr().err
    assert "'adamw8bit' with --fsdp" in err
    assert "adamw8bit with --implementation huggingface" in err
    assert "Traceback" not in err


def test_step_table_names_torchaos_eager_8bit_adamw():
    """The table's title names the optimizer stepped as the others are ("AdamW", "Muon and
    AdamW"): 8-bit AdamW under FSDP2 is torchao's, run eagerly, not bitsandbytes' (it printed
    the bare key `adamw8bit`). The figures are this run's (docs/muon-fsdp.md: dense, 2 ranks)."""
    from tiersim.cli.commands.measure_fsdp import step_table

    measured, predicted = 3_370_504, 3_372_556
    peak = dict(measured_bytes=measured, measured_phase="backward", predicted_parts={})
    peak.update(predicted_bytes=predicted, predicted_moment="backward: loss")
    config = {"dtype": "fp32", "optimizer": "adamw8bit", "seq_len": 128}
    got = {"world_size": 2, "configuration": config, "step_peak": peak}
    text = step_table(got)
    assert "transformers' model, fp32, torchao's AdamW8bit (eager), seq_len 128 tokens" in text
    assert "+2,052 B (+0.06%)" in text  # 3,372,556 - 3,370,504 = 2,052 B; / 3,370,504 = 0.061 %
