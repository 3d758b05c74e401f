"""LeRobot's own training loop with feedline's reader plugged in.

``feedline train`` parses its command line with LeRobot's parser and calls lerobot-train's
``train(cfg)``: LeRobot builds the policy, optimizer, scheduler and preprocessors, runs the loop,
logs and checkpoints. With ``--dataset.streaming=false`` nothing is changed. With
``--dataset.streaming=true`` :class:`StreamingBridge` replaces five names lerobot-train looks up
at run time, for the duration of the call:

* ``make_train_eval_datasets``: builds :class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset`
  from the flags (seed, workers, ``max_num_shards``, the ``--dataset.streaming_*`` settings),
  restores the saved data order on ``--resume=true``, and hands LeRobot a
  :class:`~feedline.episodes.train.view.LeRobotStreamingView`;
* ``cycle``: iterates the DataLoader epoch after epoch through the reader's ``track()`` (which
  counts what the loop consumed), timing each batch wait;
* ``should_save_checkpoint`` / ``save_checkpoint``: at a saving step every rank's reader state is
  gathered and written beside ``training_state/`` (:mod:`~feedline.episodes.train.order`);
* ``MetricsTracker``: LeRobot's log line and wandb dict also carry feedline's metrics;
* ``accelerate.Accelerator``: its DataLoader preparation leaves feedline's loader alone, since
  each rank already reads its own whole episodes (accelerate would re-shard or dispatch batches).

Everything else is LeRobot's code as lerobot-train runs it. Imports LeRobot (Python >= 3.12).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from feedline.episodes.errors import TrainError
from feedline.episodes.train.flags import TrainArgs, dataset_kwargs, storage_kwargs
from feedline.episodes.train.metrics import ReaderMetrics, tracker_class
from feedline.episodes.train.order import DataOrder, load_data_order, save_data_order

__all__ = ["StreamingBridge", "parse_config", "run"]

log = logging.getLogger(__name__)

#: Settings never written into a checkpoint: store options may hold credentials, and the sample
#: log is a debugging aid of one run.
_NOT_SAVED = ("storage_options", "sample_log", "report")


@contextlib.contextmanager
def _replaced(target: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, original)


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    """LeRobot's parser (and its config's validation) read ``sys.argv`` directly."""
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "invalid command line"
    for prefix in ("lerobot-train: error: ", "error: "):
        last = last.removeprefix(prefix)
    return last


def parse_config(argv: list[str]) -> Any:
    """lerobot-train's ``TrainPipelineConfig`` for ``argv``, parsed by LeRobot's own parser
    (plugins, ``--config_path``, ``--policy.path``); a parse error is one :class:`TrainError` line."""
    from lerobot.configs import parser
    from lerobot.configs.train import TrainPipelineConfig

    def config(cfg: TrainPipelineConfig) -> TrainPipelineConfig:
        return cfg

    config.__annotations__ = {"cfg": TrainPipelineConfig, "return": TrainPipelineConfig}
    captured = io.StringIO()
    with _argv(["lerobot-train", *argv]):
        try:
            with contextlib.redirect_stderr(captured):
                return parser.wrap()(config)()
        except SystemExit as exc:
            if exc.code in (0, None):
                raise
            raise TrainError(_one_line(captured.getvalue())) from None
        except (ValueError, TypeError, KeyError, FileNotFoundError) as exc:
            raise TrainError(f"{type(exc).__name__}: {_one_line(str(exc))}") from None


def _batch_size(batch: Any) -> int:
    if isinstance(batch, Mapping):
        index = batch.get("index")
        if index is not None:
            return len(index)
    return 0


class _TrackedLoader:
    """A DataLoader over the view, presented as a loader over the reader itself (what the
    reader's ``track()`` counts against)."""

    def __init__(self, loader: Any, dataset: Any) -> None:
        self.loader = loader
        self.dataset = dataset
        self.batch_size = loader.batch_size
        self.num_workers = loader.num_workers
        self.drop_last = loader.drop_last
        self.persistent_workers = loader.persistent_workers

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)


class StreamingBridge:
    """The replacements lerobot-train runs with under ``--dataset.streaming=true`` (module doc).

    Args:
        lerobot_train: the ``lerobot.scripts.lerobot_train`` module.
        settings: the feedline flags given on the command line, by keyword.
        started: ``time.perf_counter()`` at the start of the command (time to first batch).
    """

    def __init__(self, lerobot_train: Any, settings: Mapping[str, Any], started: float) -> None:
        self.lerobot_train = lerobot_train
        self.settings = dict(settings)
        self.started = started
        self.run_settings: dict[str, Any] = dict(settings)
        self.view: Any = None
        self.metrics: ReaderMetrics | None = None
        self.pending: DataOrder | None = None
        self.recorder: Any = None  # --dataset.streaming_report's RunRecorder
        self._originals = {
            name: getattr(lerobot_train, name)
            for name in ("cycle", "should_save_checkpoint", "save_checkpoint", "MetricsTracker")
        }

    @contextlib.contextmanager
    def installed(self) -> Iterator[StreamingBridge]:
        """lerobot-train's names replaced for the duration of the block."""
        import accelerate

        from feedline.episodes.train.view import LeRobotStreamingView

        class FeedlineAccelerator(accelerate.Accelerator):
            def prepare_data_loader(self, data_loader: Any, *args: Any, **kwargs: Any) -> Any:
                if isinstance(data_loader.dataset, LeRobotStreamingView):
                    return data_loader  # each rank already reads its own whole episodes
                return super().prepare_data_loader(data_loader, *args, **kwargs)

        lt = self.lerobot_train
        with contextlib.ExitStack() as stack:
            stack.enter_context(_replaced(lt, "make_train_eval_datasets", self.make_train_eval_datasets))
            stack.enter_context(_replaced(lt, "cycle", self.cycle))
            stack.enter_context(_replaced(lt, "should_save_checkpoint", self.should_save_checkpoint))
            stack.enter_context(_replaced(lt, "save_checkpoint", self.save_checkpoint))
            stack.enter_context(_replaced(lt, "MetricsTracker", self.metrics_tracker))
            stack.enter_context(_replaced(accelerate, "Accelerator", FeedlineAccelerator))
            yield self

    # ---- the dataset --------------------------------------------------------------------------

    def make_train_eval_datasets(self, cfg: Any) -> tuple[Any, None]:
        """feedline's reader for ``cfg`` (and no eval split), as lerobot-train's factory returns."""
        from lerobot.datasets.factory import resolve_delta_timestamps
        from lerobot.transforms import ImageTransforms

        from feedline.episodes.base import resolve_root
        from feedline.episodes.format import read_info
        from feedline.episodes.stream.dataset import StreamingEpisodeDataset
        from feedline.episodes.train.view import (
            LeRobotStreamingView,
            lerobot_metadata,
            use_imagenet_stats,
        )
        from feedline.io import open_store
        from feedline.streaming.schedule.plan import plan_shards_arrays
        from feedline.streaming.schedule.slot import worker_parts

        data = cfg.dataset
        if data.eval_split:
            raise TrainError("--dataset.eval_split needs map-style loading (--dataset.streaming=false)")
        saved = load_data_order(cfg.checkpoint_path) if cfg.resume and cfg.checkpoint_path else None
        if cfg.resume and saved is None and not self.settings.get("allow_order_change"):
            raise TrainError(
                f"{cfg.checkpoint_path}: the checkpoint holds no feedline data order (not written "
                "by feedline train with --dataset.streaming=true); resume with "
                "--dataset.streaming_allow_order_change=true to start the data order afresh"
            )
        self.run_settings = {**(saved.settings if saved else {}), **self.settings}
        settings = self.run_settings
        storage = storage_kwargs(settings)
        kwargs = dataset_kwargs(settings)
        kwargs.setdefault("max_num_shards", worker_parts(cfg.num_workers))  # lerobot-train's rule

        source = {"repo_id": data.repo_id, "repo_type": data.repo_type, "revision": data.revision,
                  "root": data.root}
        transforms = ImageTransforms(data.image_transforms) if data.image_transforms.enable else None
        common = {
            "image_transforms": transforms, "tolerance_s": cfg.tolerance_s, "return_uint8": True,
            "storage_options": storage or None, "seed": cfg.seed,
            "allow_order_change": bool(settings.get("allow_order_change")), **kwargs,
        }
        if settings.get("mixture"):
            dataset = self._mixture_dataset(cfg, settings["mixture"], common)
        else:
            url = resolve_root(data.repo_id, data.root, data.repo_type, data.revision)
            info = read_info(open_store(url, **storage))
            delta_timestamps = resolve_delta_timestamps(
                cfg.trainable_config, lerobot_metadata(info, **source)
            )
            dataset = StreamingEpisodeDataset(
                data.repo_id, root=data.root, repo_type=data.repo_type, revision=data.revision,
                episodes=data.episodes, delta_timestamps=delta_timestamps, **common,
            )
        meta = lerobot_metadata(
            dataset.meta.info, **source, tasks=dataset.meta.tasks, stats=dataset.meta.stats
        )
        if data.use_imagenet_stats:
            use_imagenet_stats(meta)

        owned = plan_shards_arrays(
            dataset.feed.epoch_lengths(dataset.epoch), world_size=dataset.data_world_size,
            num_workers=0,
            seed=dataset.seed, epoch=dataset.epoch,
        ).report.rank_episodes[dataset.data_rank]
        if cfg.num_workers > owned:
            log.info("rank %d owns %d episode(s): --num_workers %d -> %d",
                     dataset.rank, owned, cfg.num_workers, owned)
            cfg.num_workers = owned
        if saved is not None:
            dataset.load_state_dict(saved.rank_state(dataset.rank))
            log.info("feedline: resuming the data order of %s at step %d",
                     cfg.checkpoint_path, saved.step)
        if settings.get("report"):
            from pathlib import Path

            from feedline.episodes.forecast.measure import RunRecorder

            folder = Path(settings["report"])
            self.recorder = RunRecorder(dataset, folder if dataset.rank == 0 else folder / f"rank-{dataset.rank}")
        self.view = LeRobotStreamingView(dataset, meta)
        self.metrics = ReaderMetrics(dataset.metrics, started=self.started)
        return self.view, None

    @staticmethod
    def _mixture_dataset(cfg: Any, path: str, common: dict[str, Any]) -> Any:
        """The reader over the sources of the mixture file ``path``: the policy's windows come
        from the mixture's features and the first source's fps."""
        from lerobot.datasets.factory import resolve_delta_timestamps

        from feedline.episodes.errors import MixtureError
        from feedline.episodes.mixture.sources import load_mixture
        from feedline.episodes.stream.dataset import StreamingEpisodeDataset
        from feedline.episodes.train.view import lerobot_metadata

        try:
            mixture = load_mixture(path)
            probe = StreamingEpisodeDataset(sources=mixture, **{
                k: v for k, v in common.items() if k not in ("image_transforms",)
            })
        except MixtureError as exc:
            raise TrainError(f"--dataset.mixture={path}: {exc}") from None
        first = mixture.sources[0]
        delta_timestamps = resolve_delta_timestamps(
            cfg.trainable_config, lerobot_metadata(
                probe.meta.info, repo_id=first.repo_id or cfg.dataset.repo_id, repo_type="dataset",
                revision=first.revision, root=first.root,
            ),
        )
        try:
            return StreamingEpisodeDataset(
                sources=mixture, delta_timestamps=delta_timestamps, **common
            )
        except MixtureError as exc:
            raise TrainError(f"--dataset.mixture={path}: {exc}") from None

    # ---- the loop -------------------------------------------------------------------------------

    def cycle(self, dataloader: Any) -> Iterator[Any]:
        """Batches forever, epoch after epoch, each epoch counted by the reader's ``track()``."""
        if self.view is None or dataloader.dataset is not self.view:
            yield from self._originals["cycle"](dataloader)
            return
        dataset = self.view.dataset
        loader = _TrackedLoader(dataloader, dataset)
        sample_log = self.run_settings.get("sample_log")
        _log_ideal(dataset, loader)
        if self.recorder is not None:
            self.recorder.instrument(dataloader)
        while True:
            batches = dataset.track(loader)
            if self.recorder is not None:
                batches = self.recorder.record(batches)
            delivered = 0
            while True:
                waited = time.perf_counter()
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                delivered += 1
                assert self.metrics is not None
                self.metrics.batch_waited(time.perf_counter() - waited, _batch_size(batch))
                if sample_log:
                    self._log_samples(sample_log, dataset, batch)
                yield batch
            if not delivered:
                raise TrainError(
                    f"rank {dataset.rank}: epoch {dataset.epoch} gave no batch; check --dataset.episodes"
                )

    @staticmethod
    def _log_samples(path: str, dataset: Any, batch: Mapping[str, Any]) -> None:
        entry = {"rank": dataset.rank, "epoch": dataset.epoch,
                 "index": [int(i) for i in batch["index"]]}
        if "dataset_index" in batch:  # a mixture: which source each index is of
            entry["dataset_index"] = [int(i) for i in batch["dataset_index"]]
        line = json.dumps(entry)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    def should_save_checkpoint(self, step: int, save_freq: int, total_steps: int) -> bool:
        """LeRobot's rule; at a saving step (every rank gets here) also gather the reader states."""
        due = self._originals["should_save_checkpoint"](step, save_freq, total_steps)
        if due and self.view is not None:
            states = _gather(self.view.dataset.state_dict())
            settings = {k: v for k, v in self.run_settings.items() if k not in _NOT_SAVED}
            self.pending = DataOrder(states, settings, step)
        return due

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        """LeRobot's checkpoint, then the data order beside its ``training_state/``."""
        self._originals["save_checkpoint"](*args, **kwargs)
        checkpoint_dir = kwargs["checkpoint_dir"] if "checkpoint_dir" in kwargs else args[0]
        step = kwargs["step"] if "step" in kwargs else args[1]
        if self.pending is not None and self.pending.step == step:
            save_data_order(checkpoint_dir, self.pending)

    def write_report(self) -> None:
        """``report.html`` of the run (``--dataset.streaming_report``), with the doctor's
        findings on the dataset's roots."""
        if self.recorder is None or not self.recorder.batches:
            return
        from feedline.episodes.doctor.runner import run_doctor

        doctor = [run_doctor(s.reader.store_url, storage_options=s.reader.storage_options,
                             progress=False) for s in self.view.dataset.feed.sources]
        path = self.recorder.write_report(doctor=doctor)
        log.info("feedline: wrote %s", path)

    def metrics_tracker(self, *args: Any, **kwargs: Any) -> Any:
        """LeRobot's ``MetricsTracker``, carrying feedline's metrics when the reader is feedline's."""
        base = self._originals["MetricsTracker"]
        if self.metrics is None:
            return base(*args, **kwargs)
        from lerobot.utils.logging_utils import AverageMeter

        return tracker_class(base, AverageMeter, self.metrics)(*args, **kwargs)


def _gather(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's ``state``, by rank (a collective: every rank must call it)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [state]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, state)
    return out


def run(args: TrainArgs, started: float | None = None) -> int:
    """Run lerobot-train's loop for ``args`` (feedline's reader when streaming); returns 0."""
    started = time.perf_counter() if started is None else started
    if args.settings.get("report"):  # a missing extra fails now, not after the training
        from feedline.episodes.forecast.plots import pyplot

        pyplot()
    from lerobot.scripts import lerobot_train  # registers the policies, envs and rewards it parses
    from lerobot.utils.import_utils import register_third_party_plugins

    register_third_party_plugins()
    cfg = parse_config(args.lerobot_args)
    with _argv(["lerobot-train", *args.lerobot_args]):
        if not cfg.dataset.streaming:
            if args.settings:
                raise TrainError("--dataset.streaming_* flags only apply with --dataset.streaming=true")
            lerobot_train.train(cfg)
            return 0
        bridge = StreamingBridge(lerobot_train, args.settings, started)
        with bridge.installed():
            lerobot_train.train(cfg)
        bridge.write_report()
    return 0


def _log_ideal(dataset: Any, dataloader: Any) -> None:
    """Once per run: the batch diversity an ideal global shuffle would give, to read the log
    line's ``ep/batch``, ``ep/10batch`` and ``ep@10%`` against."""
    ideal = dataset.ideal_diversity(dataloader.batch_size or 1, dataloader.drop_last)
    log.info(
        "feedline: an ideal global shuffle of rank %d's episodes would give ep/batch %.2f "
        "(p5 %.0f, min %.1f), ep/10batch %.1f, ep@10%% %.2f",
        dataset.rank, ideal.batch_episodes_mean, ideal.batch_episodes_p5,
        ideal.batch_episodes_min, ideal.window_episodes_mean, ideal.early_episode_share,
    )
