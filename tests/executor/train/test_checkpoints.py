"""A run saved at a checkpoint and resumed in a fresh call continues exactly where it stopped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from trial_executor import (
    CHECKPOINT_FILE,
    Checkpointing,
    TextClassificationData,
    TrainConfig,
    TrialInterrupted,
    UnusableCheckpointError,
    demo_dataset,
    run_trial,
)
from trial_executor.train._optimizer import load_optimizer_state, make_optimizer


@pytest.fixture(scope="module")
def data() -> TextClassificationData:
    return demo_dataset(n_train=500, n_valid=80, seed=8)


# Two epochs of 16 optimizer steps (500 rows / 16 / 2 accumulation): resuming crosses an epoch boundary.
CONFIG = TrainConfig(
    fp_precision="fp16", epochs=2, batch_size=16, grad_accum_steps=2, eval_every=5, length_grouping=True, device="cpu"
)


# bf16 on master weights: the checkpoint holds the float32 masters; the resumed run's bf16 copies are made from them.
@pytest.mark.parametrize("config", [CONFIG, CONFIG.replace(fp_precision="bf16", master_weights=True)], ids=["fp16", "bf16-master"])
def test_interrupted_then_resumed_run_matches_an_uninterrupted_one(config: TrainConfig, data: TextClassificationData, tmp_path: Path) -> None:
    straight = run_trial(config, data)

    saved: list[int] = []
    calls = {"n": 0}

    def stop_after_seven_steps() -> bool:
        calls["n"] += 1
        return calls["n"] >= 7

    first = Checkpointing(directory=tmp_path / "first", on_saved=lambda path, step: saved.append(step))
    with pytest.raises(TrialInterrupted) as caught:
        run_trial(config, data, checkpointing=first, stop_requested=stop_after_seven_steps)
    assert caught.value.step == 7 and saved == [5, 7]
    assert caught.value.checkpoint == tmp_path / "first" / CHECKPOINT_FILE

    at_ten = tmp_path / "at-ten.pt"  # the resumed run's evaluation checkpoint at step 10, kept
    second = Checkpointing(
        directory=tmp_path / "second", resume_from=caught.value.checkpoint,
        on_saved=lambda path, step: step == 10 and shutil.copyfile(path, at_ten),
    )
    seen: list[int] = []
    resumed = run_trial(config, data, lambda step, metrics: seen.append(step) or False, checkpointing=second)

    assert resumed.resumed_at_step == 7 and seen[0] == 10  # reports only what it ran itself
    assert resumed.steps == straight.steps == 32
    # Same weights, optimizer, GradScaler, dropout and batch order: the same evaluations.
    assert resumed.history == straight.history
    assert (tmp_path / "second" / CHECKPOINT_FILE).is_file()
    # Struck again after step 10 (a kill: no checkpoint of its own), it resumes from that
    # evaluation's checkpoint: the loss carried across the first interruption is not counted twice.
    third = run_trial(config, data, checkpointing=Checkpointing(directory=tmp_path / "third", resume_from=at_ten))
    assert third.resumed_at_step == 10 and third.history == straight.history


def test_a_checkpoint_from_another_config_is_refused(data: TextClassificationData, tmp_path: Path) -> None:
    config = TrainConfig(epochs=1, batch_size=32, eval_every=3, device="cpu")
    with pytest.raises(TrialInterrupted) as caught:
        run_trial(config, data, checkpointing=Checkpointing(tmp_path), stop_requested=lambda: True)
    assert torch.load(caught.value.checkpoint, weights_only=False)["step"] == 1
    other = TrainConfig(**{**config.to_dict(), "learning_rate": 0.5})
    # The field that differs is named (it said "another config or data": a rerun's other --seed was a riddle).
    with pytest.raises(UnusableCheckpointError, match=r"saved by a run with learning_rate=0\.001, not 0\.5; it cannot be resumed"):
        run_trial(other, data, checkpointing=Checkpointing(tmp_path / "b", resume_from=caught.value.checkpoint))


def test_a_checkpoint_that_cannot_be_resumed_starts_the_run_over_where_its_caller_takes_that(
    data: TextClassificationData, tmp_path: Path,
) -> None:
    """Truncated, empty or another config's: the run failed (EOFError, OSError, UnpicklingError), the trial lost for
    good; with ``on_unusable`` it starts at step 0, exactly as a fresh run."""
    config = TrainConfig(epochs=1, batch_size=32, eval_every=3, max_steps=4, device="cpu")
    fresh = run_trial(config, data)
    with pytest.raises(TrialInterrupted) as caught:
        run_trial(config, data, checkpointing=Checkpointing(tmp_path / "a"), stop_requested=lambda: True)
    whole = caught.value.checkpoint.read_bytes()
    cases = {"truncated": whole[:1000], "empty": b"", "garbage": b"not a checkpoint", "another seed": None}
    for name, content in cases.items():
        path = tmp_path / f"{name}.pt"
        path.write_bytes(whole if content is None else content)
        wanted = config.replace(seed=config.seed + 1) if content is None else config
        with pytest.raises(UnusableCheckpointError):
            run_trial(wanted, data, checkpointing=Checkpointing(tmp_path / "b", resume_from=path))
        said: list[str] = []
        checkpointing = Checkpointing(tmp_path / "c", resume_from=path, on_unusable=lambda e, said=said: said.append(str(e)))
        result = run_trial(wanted, data, checkpointing=checkpointing)
        assert result.resumed_at_step is None and result.steps == 4 and len(said) == 1, name
        if content is not None:
            assert result.history == fresh.history and "cannot be read" in said[0], name
        else:
            assert "seed=0, not 1" in said[0]


def test_a_checkpoint_resumes_where_the_same_rows_per_step_are_cut_into_smaller_micro_batches(tmp_path: Path) -> None:
    """oom_fallback's half batch: saved at 16 x 1, resumed at 8 x 2 from the same step, on the rows the run at 16 would
    train next (its epoch position doubled: 7 batches of 16 rows are 14 of 8), across an epoch's end (100 rows)."""
    data = demo_dataset(n_train=100, n_valid=40, seed=1)
    config = TrainConfig(epochs=2, batch_size=16, eval_every=3, device="cpu")
    half = config.replace(batch_size=8, grad_accum_steps=2, eval_batch_size=config.eval_batch_size // 2)

    def interrupted(cfg: TrainConfig, after: int, directory: Path, resume_from: Path | None = None) -> tuple[Path, dict]:
        calls = {"n": 0}

        def stop() -> bool:
            calls["n"] += 1
            return calls["n"] >= after

        with pytest.raises(TrialInterrupted) as caught:
            run_trial(cfg, data, checkpointing=Checkpointing(directory, resume_from=resume_from), stop_requested=stop)
        return caught.value.checkpoint, torch.load(caught.value.checkpoint, weights_only=False)

    at_five, _ = interrupted(config, 5, tmp_path / "a")
    _, straight = interrupted(config, 11, tmp_path / "b")
    _, resumed = interrupted(half, 6, tmp_path / "c", resume_from=at_five)  # steps 6..11
    assert (straight["step"], resumed["step"]) == (11, 11)
    ran, went_on = straight["progress"], resumed["progress"]
    # The same rows: as many, with as many real tokens (padding differs with the batch), in the same epoch.
    assert (went_on["epoch"], went_on["samples"], went_on["tokens"]) == (ran["epoch"], ran["samples"], ran["tokens"]) == (1, 164, ran["tokens"])
    assert (ran["next_batch"], went_on["next_batch"]) == (4, 8)
    assert went_on["history"][0] == ran["history"][0]  # step 3's evaluation, carried in the checkpoint
    assert run_trial(half, data, checkpointing=Checkpointing(tmp_path / "d", resume_from=at_five)).resumed_at_step == 5

    # Not the same rows per step, or batches that length grouping fills by the batch's size: refused.
    for other in (half.replace(grad_accum_steps=1), config.replace(batch_size=32, grad_accum_steps=1)):
        with pytest.raises(UnusableCheckpointError, match="saved by a run with batch_size=16, not"):
            run_trial(other, data, checkpointing=Checkpointing(tmp_path / "e", resume_from=at_five))
    grouped = config.replace(length_grouping=True)
    at_five_grouped, _ = interrupted(grouped, 5, tmp_path / "f")
    with pytest.raises(UnusableCheckpointError, match="saved by a run with batch_size=16, not 8"):
        run_trial(half.replace(length_grouping=True), data, checkpointing=Checkpointing(tmp_path / "g", resume_from=at_five_grouped))


def test_a_stop_request_at_the_step_that_prunes_or_stops_early_ends_the_run_as_that(tmp_path: Path) -> None:
    """A stop request (a worker's SIGTERM) that lands on the evaluation that pruned or stopped the run
    early ends it as pruned or early-stopped: interrupted there, its retry would train past that point."""
    data = demo_dataset(n_train=100, n_valid=40, seed=1)
    config = TrainConfig(epochs=3, batch_size=32, learning_rate=2e-3, eval_every=1, early_stopping_patience=2, eval_sample_size=20, device="cpu")
    straight = run_trial(config, data)
    assert straight.stopped_reason == "early_stopping" and straight.steps < 12
    calls = {"n": 0}

    def stop_at(step: int) -> bool:
        calls["n"] += 1
        return calls["n"] >= step

    stopped = run_trial(config, data, checkpointing=Checkpointing(tmp_path / "a"), stop_requested=lambda: stop_at(straight.steps))
    assert stopped.stopped_reason == "early_stopping" and stopped.history == straight.history

    calls["n"] = 0
    pruning = config.replace(early_stopping_patience=None)
    pruned = run_trial(pruning, data, lambda step, metrics: step >= 2, checkpointing=Checkpointing(tmp_path / "b"), stop_requested=lambda: stop_at(2))
    assert pruned.stopped_reason == "pruned" and pruned.steps == 2


def test_an_optimizer_resumed_from_a_run_that_stepped_another_way_keeps_its_own_way_and_rate_tensor() -> None:
    # A checkpoint of an eager CPU run (fused AdamW, a float rate) resumed where the step is compiled or recorded
    # (foreach, capturable, the rate a tensor its graphs read), and the other way round.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    config = TrainConfig(learning_rate=3e-3)
    eager = make_optimizer(model, config, torch.device("cpu"))
    model(torch.randn(3, 4)).sum().backward()
    eager.step()
    whole_step = make_optimizer(model, config, torch.device("cpu"), compiled=True)
    rate = whole_step.param_groups[0]["lr"]
    load_optimizer_state(whole_step, eager.state_dict())
    group = whole_step.param_groups[0]
    assert (group["capturable"], group["foreach"], bool(group["fused"])) == (True, True, False) and group["lr"] is rate
    assert rate.item() == pytest.approx(3e-3)
    for param in model.parameters():
        state, saved = whole_step.state[param], eager.state[param]
        assert torch.equal(state["exp_avg"], saved["exp_avg"]) and state["step"].dtype == torch.float32 and state["step"].item() == 1
    back = make_optimizer(model, config, torch.device("cpu"))
    load_optimizer_state(back, whole_step.state_dict())
    assert back.param_groups[0]["fused"] and not back.param_groups[0]["capturable"]
    assert isinstance(back.param_groups[0]["lr"], float) and back.param_groups[0]["lr"] == pytest.approx(3e-3)
    back.step()  # and steps as built
