"""``feedline train`` runs lerobot-train's loop: streaming from nginx, resumed, map-style, two ranks.

Real runs of the command (subprocesses), the small ACT policy on a CPU, real DataLoader workers.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

pytest.importorskip("lerobot")

from feedline.episodes.train.order import ORDER_FILE, load_data_order  # noqa: E402
from tests.lerobot.conftest import (  # noqa: E402
    ACT_FLAGS,
    BIN,
    Served,
    feedline_train,
    fresh,
    run_command,
    sample_log,
)


def _streaming(served: Served, out: Path, *extra: str) -> list[str]:
    return [f"--dataset.repo_id=local/{served.root.name}", f"--dataset.root={served.url}",
            "--dataset.streaming=true", *ACT_FLAGS, f"--output_dir={out}", *extra]


def _indices(batches: list[dict]) -> list[list[int]]:
    return [b["index"] for b in batches]


def test_streaming_resume_continues_sample_exactly(
    served_dataset: Served, lerobot_env: dict[str, str], tmp_path: Path
) -> None:
    whole_log, first_log, resumed_log = tmp_path / "whole.jsonl", tmp_path / "first.jsonl", tmp_path / "resumed.jsonl"
    common = ("--num_workers=2", "--save_freq=10")

    whole = feedline_train(
        _streaming(served_dataset, fresh(tmp_path / "whole"), "--steps=20", *common,
                   f"--dataset.streaming_sample_log={whole_log}"), lerobot_env)
    assert whole.returncode == 0, whole.stderr[-3000:]
    # feedline's metrics ride on LeRobot's own log line; time to first batch is said once
    log_lines = [line for line in whole.stderr.splitlines() if " step:" in line and "loss:" in line]
    assert len(log_lines) == 4  # steps 5, 10, 15, 20 (--log_freq=5)
    for name in ("data_smp/s:", "wait_p50:", "wait_p95:", "wait_p99:", "stalls:", "fetch_MB:", "resv_MB:",
                 "ep/batch:", "ep/10batch:", "ep@10%:"):
        assert all(name in line for line in log_lines), name
    assert "first_batch_s:" in log_lines[0] and "first_batch_s:" not in log_lines[1]
    assert whole.stderr.count("feedline: first batch after") == 1
    assert whole.stderr.count("feedline: an ideal global shuffle") == 1  # what ep/* read against
    # the data order lies beside LeRobot's training_state/ in every checkpoint
    for step in ("000010", "000020"):
        checkpoint = tmp_path / "whole" / "checkpoints" / step
        assert (checkpoint / "training_state").is_dir() and (checkpoint / ORDER_FILE).is_file()
    order = load_data_order(tmp_path / "whole" / "checkpoints" / "000010")
    assert order is not None and order.step == 10 and order.world_size == 1
    assert order.ranks[0]["batches_consumed_on_rank"] == 10

    # lerobot-train's DataLoader defaults, unchanged: the run crosses an epoch with persistent workers
    saved_config = json.loads((tmp_path / "whole" / "checkpoints" / "000020" / "pretrained_model"
                               / "train_config.json").read_text())
    assert saved_config["persistent_workers"] is True and saved_config["prefetch_factor"] == 4

    whole_batches = sample_log(whole_log)
    assert len(whole_batches) == 20
    # the first epoch (131 frames, batches of 8 from 2 workers) covers every frame exactly once
    epoch0 = [i for b in whole_batches if b["epoch"] == 0 for i in b["index"]]
    assert sorted(epoch0) == list(range(served_dataset.synth.total_frames))
    assert any(b["epoch"] == 1 for b in whole_batches)

    # the same run stopped at step 10, then resumed to 20 from LeRobot's checkpoint
    first = feedline_train(
        _streaming(served_dataset, fresh(tmp_path / "split"), "--steps=10", *common,
                   f"--dataset.streaming_sample_log={first_log}"), lerobot_env)
    assert first.returncode == 0, first.stderr[-3000:]
    config = tmp_path / "split" / "checkpoints" / "last" / "pretrained_model" / "train_config.json"
    resumed = feedline_train(
        [f"--config_path={config}", "--resume=true", "--steps=20",
         f"--dataset.streaming_sample_log={resumed_log}"], lerobot_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming the data order" in resumed.stderr
    assert _indices(sample_log(first_log)) == _indices(whole_batches[:10])
    assert _indices(sample_log(resumed_log)) == _indices(whole_batches[10:])


def test_resume_refuses_a_changed_order_setting_by_flag(
    served_dataset: Served, lerobot_env: dict[str, str], tmp_path: Path
) -> None:
    out = fresh(tmp_path / "run")
    first = feedline_train(
        _streaming(served_dataset, out, "--steps=2", "--num_workers=0", "--save_freq=2"), lerobot_env)
    assert first.returncode == 0, first.stderr[-3000:]
    config = out / "checkpoints" / "last" / "pretrained_model" / "train_config.json"
    changed = feedline_train(
        [f"--config_path={config}", "--resume=true", "--steps=4",
         "--dataset.streaming_episode_pool_size=2"], lerobot_env)
    assert changed.returncode != 0
    assert changed.error_lines[-1].startswith("feedline: error:")
    assert "--dataset.streaming_episode_pool_size" in changed.error_lines[-1]
    assert "--dataset.streaming_allow_order_change=true" in changed.error_lines[-1]


def test_map_style_runs_lerobots_own_reader(
    served_dataset: Served, lerobot_env: dict[str, str], tmp_path: Path
) -> None:
    out = fresh(tmp_path / "map")
    run = feedline_train(
        [f"--dataset.repo_id=local/{served_dataset.root.name}", f"--dataset.root={served_dataset.root}",
         "--dataset.streaming=false", *ACT_FLAGS, f"--output_dir={out}", "--steps=4",
         "--num_workers=0", "--save_freq=4"], lerobot_env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "feedline:" not in run.stderr  # nothing of feedline's in the loop
    checkpoint = out / "checkpoints" / "000004"
    assert (checkpoint / "training_state").is_dir() and not (checkpoint / ORDER_FILE).exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


LAUNCHERS = {  # two CPU processes (accelerate's --cpu would start one; the policy's device decides)
    "torchrun": lambda port: [str(BIN / "torchrun"), "--nproc_per_node=2", f"--master_port={port}"],
    "accelerate": lambda port: [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes=2",
                                "--num_machines=1", "--mixed_precision=no", "--dynamo_backend=no",
                                f"--main_process_port={port}"],
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_two_ranks_own_disjoint_episodes_and_stop_together(
    launcher: str, served_dataset: Served, lerobot_env: dict[str, str], tmp_path: Path
) -> None:
    out, log = fresh(tmp_path / "ddp"), tmp_path / "ranks.jsonl"
    steps = 6
    run = run_command(
        [*LAUNCHERS[launcher](_free_port()), "-m", "feedline.cli", "train",
         *_streaming(served_dataset, out, f"--steps={steps}", "--num_workers=1", f"--save_freq={steps}",
                     f"--dataset.streaming_sample_log={log}")],
        lerobot_env)
    assert run.returncode == 0, run.stderr[-3000:]
    batches = sample_log(log)
    by_rank = {r: [b for b in batches if b["rank"] == r] for r in (0, 1)}
    assert [len(by_rank[0]), len(by_rank[1])] == [steps, steps]  # both ranks ran every step
    synth = served_dataset.synth
    episodes = {r: {synth.locate(i)[0] for b in by_rank[r] for i in b["index"]} for r in (0, 1)}
    assert episodes[0] and episodes[1] and not episodes[0] & episodes[1]
    order = load_data_order(out / "checkpoints" / f"{steps:06d}")
    assert order is not None and order.world_size == 2
    assert [r["rank"] for r in order.ranks] == [0, 1]
    assert all(r["batches_consumed_on_rank"] == steps for r in order.ranks)


def test_workers_are_capped_at_the_episodes_a_rank_owns(
    served_dataset: Served, lerobot_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "batches.jsonl"
    run = feedline_train(
        _streaming(served_dataset, fresh(tmp_path / "cap"), "--steps=3", "--num_workers=4",
                   "--save_freq=3", "--dataset.episodes=[0,1]", f"--dataset.streaming_sample_log={log}"),
        lerobot_env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "owns 2 episode(s): --num_workers 4 -> 2" in run.stderr
    order = load_data_order(tmp_path / "cap" / "checkpoints" / "000003")
    assert order is not None and order.ranks[0]["num_workers"] == 2
    lengths = served_dataset.synth.episode_lengths
    assert all(i < lengths[0] + lengths[1] for b in sample_log(log) for i in b["index"])


def test_act_trains_on_a_mixture_of_two_datasets_and_resumes_it(
    served_dataset: Served, nginx_server, lerobot_env: dict[str, str], tmp_path: Path
) -> None:
    """Two sources over nginx, one without the second camera and with a narrower state: ACT
    trains on their union, the mixture's counts hold per epoch, and a resume continues exactly."""
    from feedline.episodes.synth.writer import write_synthetic_dataset

    other = Path(nginx_server.root) / "train-mix-b"
    if not other.exists():
        write_synthetic_dataset(other, episodes=3, frames_per_episode=[24, 20, 26], cameras=[
            "observation.images.cam_0"], fps=10, state_dim=4)
    mixture = tmp_path / "mixture.yaml"
    mixture.write_text(
        f"sources:\n  - root: {served_dataset.url}\n    weight: 3\n"
        f"  - root: {nginx_server.url}/train-mix-b\n    weight: 1\nepoch_size: 120\n"
    )
    whole_log, first_log, resumed_log = (tmp_path / f"{n}.jsonl" for n in ("w", "f", "r"))
    common = ("--dataset.repo_id=local/mixture", "--dataset.streaming=true", *ACT_FLAGS,
              f"--dataset.mixture={mixture}", "--num_workers=2", "--save_freq=8")
    whole = feedline_train([*common, f"--output_dir={fresh(tmp_path / 'whole')}", "--steps=16",
                            f"--dataset.streaming_sample_log={whole_log}"], lerobot_env)
    assert whole.returncode == 0, whole.stderr[-3000:]
    batches = sample_log(whole_log)
    epoch0 = [d for b in batches if b["epoch"] == 0 for d in b["dataset_index"]]
    assert len(epoch0) == 120 and epoch0.count(0) == 90 and epoch0.count(1) == 30
    first = feedline_train([*common, f"--output_dir={fresh(tmp_path / 'split')}", "--steps=8",
                            f"--dataset.streaming_sample_log={first_log}"], lerobot_env)
    assert first.returncode == 0, first.stderr[-3000:]
    config = tmp_path / "split" / "checkpoints" / "last" / "pretrained_model" / "train_config.json"
    resumed = feedline_train([f"--config_path={config}", "--resume=true", "--steps=16",
                              f"--dataset.streaming_sample_log={resumed_log}"], lerobot_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    def keys(log: Path) -> list[list[tuple[int, int]]]:
        return [list(zip(b["dataset_index"], b["index"], strict=True)) for b in sample_log(log)]

    assert keys(first_log) == keys(whole_log)[:8]
    assert keys(resumed_log) == keys(whole_log)[8:]
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"sources:\n  - root: {nginx_server.url}/no-such-dataset\n")
    run = feedline_train([*common[:-2], f"--dataset.mixture={bad}", "--steps=1",
                          f"--output_dir={fresh(tmp_path / 'bad')}"], lerobot_env)
    assert run.returncode != 0
    line = run.error_lines[-1]
    assert "no-such-dataset" in line and "source 0 cannot be opened" in line and str(bad) in line
