"""A plain PyTorch DDP training loop over a feedline reader, for ``torchrun`` in the tests.

What a user writes: ``DistributedDataParallel`` (gloo, CPU), ``for batch in
dataset.track(DataLoader(...))``, one gradient all-reduce per step. A rank with one batch more
than another blocks in that all-reduce until the job is killed, so this loop finishing at all is
the test; each rank also writes what it read and how many steps it took, per epoch.

    torchrun --nproc_per_node=2 tests/ddp_loop.py --reader episodes --root R --out DIR
             [--epochs 2] [--batch-size 4] [--workers 1] [--stop-after N] [--resume STATE]

``--stop-after N`` saves rank 0's ``state_dict()`` (the job's checkpoint) after N steps of
the first epoch run and exits; ``--resume STATE`` loads it on every rank before the first
epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader


def torchrun(out: Path, *loop_args: str, nproc: int, nnodes: int = 1, timeout: float = 300,
             env: dict[str, str] | None = None) -> list[dict]:
    """Run this loop under ``torchrun`` (``nnodes`` agents rendezvousing on 127.0.0.1, each
    node with its own ``$FEEDLINE_HOME``) and return every rank's record; a hang fails."""
    import socket
    import subprocess

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out.mkdir(parents=True, exist_ok=True)
    agents = []
    for node in range(nnodes):
        node_env = {**os.environ, **(env or {}), "FEEDLINE_HOME": str(out / f"home-{node}"),
                    "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "OMP_NUM_THREADS": "1"}
        agents.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
             f"--node_rank={node}", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
             f"--master_port={port}", str(Path(__file__).resolve()), *loop_args, "--out", str(out)],
            env=node_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    try:
        for agent in agents:
            logs.append(agent.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for agent in agents:
            agent.kill()
        raise AssertionError(f"the DDP job did not finish in {timeout:.0f} s (a rank waiting "
                             "alone in a collective hangs this way)") from None
    for agent, text in zip(agents, logs, strict=True):
        assert agent.returncode == 0, text[-4000:]
    world = nproc * nnodes
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def _reader(kind: str, root: str, chunk_windows: int) -> object:
    if kind == "episodes":
        from feedline.episodes import StreamingEpisodeDataset

        return StreamingEpisodeDataset(root=root, delta_timestamps={"action": [0.0, 0.1]},
                                       episode_pool_size=2)
    from feedline.text import TokenDataset

    return TokenDataset(root, 15, chunk_windows=chunk_windows, return_index=True)


def _features(kind: str, batch: dict) -> tuple[torch.Tensor, list]:
    if kind == "episodes":
        x = batch["action"].float().flatten(1)
        keys = list(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist(), strict=True))
        return x, keys
    return batch["input_ids"].float(), batch["window_index"].tolist()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reader", choices=["episodes", "tokens"], required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--stop-after", type=int, default=None)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--chunk-windows", type=int, default=6)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    ds = _reader(args.reader, args.root, args.chunk_windows)
    if args.resume:
        ds.load_state_dict(json.loads(Path(args.resume).read_text()))
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers,
                        timeout=120 if args.workers else 0)
    model = None
    optimiser = None
    record: dict = {"rank": rank, "world_size": dist.get_world_size(), "epochs": []}
    out = Path(args.out)
    for _ in range(args.epochs):
        epoch = {"epoch": ds.epoch, "steps": 0, "keys": [],
                 "evened": ds.evened_anchors(args.workers)}
        for batch in ds.track(loader):
            x, keys = _features(args.reader, batch)
            if model is None:
                model = DistributedDataParallel(torch.nn.Linear(x.shape[1], 1))
                optimiser = torch.optim.SGD(model.parameters(), lr=1e-3)
            optimiser.zero_grad()
            model(x).mean().backward()  # the all-reduce every rank must reach
            optimiser.step()
            epoch["steps"] += 1
            epoch["keys"].extend(keys)
            if args.stop_after is not None and epoch["steps"] == args.stop_after:
                record["epochs"].append(epoch)
                if rank == 0:
                    (out / "state.json").write_text(json.dumps(ds.state_dict()))
                (out / f"rank{rank}.json").write_text(json.dumps(record))
                dist.barrier()
                dist.destroy_process_group()
                return 0
        record["epochs"].append(epoch)
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    sys.exit(main())
