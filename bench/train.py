"""Training speed: ``feedline train`` streaming from nginx against ``lerobot-train`` map-style on a local folder.

Both run LeRobot's own loop with the same small ACT policy, batch size, workers and steps, on one
synthetic LeRobot v3 dataset; the only difference is the reader (feedline's streaming reader over
HTTP vs LeRobot's map-style ``LeRobotDataset`` on the folder). From LeRobot's own log line
(``updt_s``, ``data_s``, averaged per ``--log_freq`` window; the first window, with the workers'
start and the sidecar build, is left out) it prints steps/s and the data-wait share
(``data_s / (data_s + updt_s)``), medians over windows and repeats, and ratios against
lerobot-train from the same run. Needs LeRobot (run it with ``.venv-lerobot/bin/python``); without
it, it says so and exits 0.

    .venv-lerobot/bin/python bench/train.py [--steps 60] [--repeats 1] [--workers 2] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/servers.py starts nginx the way the test suite does

BIN = Path(sys.executable).parent
LAYOUT = dict(episodes=12, frames_per_episode=60, cameras=2, fps=10, width=96, height=72)
ACT = ("--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false",
       "--policy.pretrained_backbone_weights=null", "--policy.dim_model=64", "--policy.n_heads=2",
       "--policy.dim_feedforward=128", "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1",
       "--policy.chunk_size=8", "--policy.n_action_steps=8", "--wandb.enable=false",
       "--save_checkpoint=false")
LOG_LINE = re.compile(r"step:\S+ .*updt_s:(?P<update>[\d.]+) data_s:(?P<data>[\d.]+)")


def windows(stderr: str) -> list[tuple[float, float]]:
    """(update seconds, data seconds) per step, one pair per LeRobot log window, first left out."""
    pairs = [(float(m["update"]), float(m["data"])) for m in LOG_LINE.finditer(stderr)]
    return pairs[1:]


def run(argv: list[str], env: dict[str, str]) -> tuple[list[tuple[float, float]], float]:
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{argv[0]} failed:\n{proc.stderr[-3000:]}")
    return windows(proc.stderr), time.monotonic() - started


def summary(pairs: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    """Median steps/s, data-wait share, data and update seconds per step over the windows."""
    steps_per_s = statistics.median(1 / (u + d) for u, d in pairs)
    share = statistics.median(d / (u + d) for u, d in pairs)
    data_s = statistics.median(d for _, d in pairs)
    update_s = statistics.median(u for u, _ in pairs)
    return steps_per_s, share, data_s, update_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-freq", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    if importlib.util.find_spec("lerobot") is None:
        print("bench/train.py needs LeRobot: run it with .venv-lerobot/bin/python (make venv-lerobot)")
        return 0

    from tests.servers import run_nginx

    from feedline.episodes.synth.writer import write_synthetic_dataset

    with tempfile.TemporaryDirectory(prefix="feedline-bench-train-") as tmp:
        work = Path(tmp)
        env = dict(os.environ, HF_LEROBOT_HOME=str(work / "lerobot"), HF_HUB_OFFLINE="1",
                   FEEDLINE_HOME=str(work / "feedline"), WANDB_MODE="disabled", TQDM_DISABLE="1")
        with run_nginx(work / "nginx") as server:
            root = Path(server.root) / "ds"
            write_synthetic_dataset(root, **LAYOUT)
            common = [*ACT, f"--steps={args.steps}", f"--log_freq={args.log_freq}",
                      f"--batch_size={args.batch_size}", f"--num_workers={args.workers}",
                      "--dataset.repo_id=local/ds"]
            results: dict[str, list] = {"lerobot-train map-style, local": [], "feedline train streaming, nginx": []}
            for repeat in range(args.repeats):  # alternate, so both see the same machine
                for name in results:
                    out = work / f"out-{repeat}-{len(results[name])}-{name.split()[0]}"
                    if name.startswith("lerobot"):
                        argv = [str(BIN / "lerobot-train"), *common, f"--dataset.root={root}",
                                f"--output_dir={out}"]
                    else:
                        argv = [str(BIN / "feedline"), "train", *common, f"--dataset.root={server.url}/ds",
                                "--dataset.streaming=true", f"--output_dir={out}"]
                    results[name].append(run(argv, env))

    frames = LAYOUT["episodes"] * LAYOUT["frames_per_episode"]
    print(f"dataset: {LAYOUT['episodes']} episodes x {LAYOUT['frames_per_episode']} frames ({frames}), "
          f"{LAYOUT['cameras']} AV1 cameras {LAYOUT['width']}x{LAYOUT['height']} at {LAYOUT['fps']} fps")
    print(f"ACT (dim 64, 1+1 layers, chunk 8), batch {args.batch_size}, {args.workers} workers, "
          f"{args.steps} steps, log every {args.log_freq}, {args.repeats} repeat(s); first window left out\n")
    print("| run | steps/s | vs lerobot-train | data-wait share | data_s per step | updt_s per step | wall s |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for name, runs in results.items():
        pairs = [p for window, _ in runs for p in window]
        steps_per_s, share, data_s, update_s = summary(pairs)
        wall = statistics.median(seconds for _, seconds in runs)
        base = steps_per_s if base is None else base
        print(f"| {name} | {steps_per_s:.2f} | x{steps_per_s / base:.2f} | {share:.1%} | {data_s:.4f} | {update_s:.3f} | {wall:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
