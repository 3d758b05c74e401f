"""The per-video checks: the MP4 index, its edit list, its codec and its keyframes.

Each video is indexed with the readers' own code (``locate_moov`` → ``parse_moov`` →
``build_table``, what the sidecar builder runs), reading its ``moov`` box with a few range reads
and never a sample, so whatever makes the readers refuse a video (no moov, a truncated file,
sample ranges past its end, an edit list they do not play) is reported with their message. An
edit-list refusal is told apart by building the table again without the edit list: if that
succeeds, the edit list alone is what the readers reject.

The keyframe interval comes from the sync-sample table. Reading one random frame decodes from
the keyframe before it, so a GOP of ``g`` frames costs on average ``(g + 1) / 2`` decoded frames
per random frame (``span_mode="minimal"``) and ``g`` with the readers' default span, which
decodes each GOP whole for its neighbours.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache

import numpy as np

from feedline.episodes.doctor.findings import Findings
from feedline.episodes.doctor.reads import CountingStore
from feedline.episodes.errors import Mp4Error
from feedline.episodes.video.codec import codec_config
from feedline.episodes.video.mp4.boxes import locate_moov, parse_moov
from feedline.episodes.video.mp4.table import SampleTable, build_table

#: Decoders FFmpeg uses for a sample entry without a configuration box a bare codec context takes
#: (the readers then decode through a container, which picks FFmpeg's default decoder).
FALLBACK_DECODERS = {
    "av01": ("libdav1d", "libaom-av1"),  # FFmpeg's native av1 decoder needs hardware
    "avc1": ("h264",), "avc3": ("h264",),
    "hvc1": ("hevc",), "hev1": ("hevc",),
    "vp09": ("libvpx-vp9", "vp9"), "vp08": ("libvpx", "vp8"),
    "mp4v": ("mpeg4",),
}
#: Mean decoded frames per random frame above which random access is flagged as slow.
SLOW_RANDOM_ACCESS_FRAMES = 8.0


def index_video(store: CountingStore, path: str, size: int, findings: Findings) -> SampleTable | None:
    """The video's sample table, or ``None`` after reporting why the readers cannot use it."""
    if size == 0:
        findings.error("files", path, None, "zero-byte MP4: every episode in it has no frames",
                       "restore the file from the dataset's source, or re-encode its episodes")
        return None
    name = store.url(path)
    with store.kind("mp4_index"):
        try:
            moov = locate_moov(lambda s, e: store.read_range(path, s, e), size, name)
            raw = parse_moov(moov, name)
        except Mp4Error as exc:
            findings.error("files", path, None, f"the readers cannot index it: {exc}",
                           "the file is incomplete or damaged: restore it from the source (a recorder that "
                           "crashed leaves no moov), or re-encode its episodes")
            return None
    try:
        return build_table(raw, size, name)
    except Mp4Error as exc:
        if raw.edits:
            try:
                build_table(dataclasses.replace(raw, edits=None), size, name)
            except Mp4Error:
                pass
            else:
                findings.error(
                    "edit_list", path, None, f"the readers reject its edit list: {exc}",
                    "remux it with a single edit or none (ffmpeg -i in.mp4 -c copy out.mp4 rewrites a "
                    "plain one); FFmpeg itself would play the frames at the wrong times",
                )
                return None
        findings.error("files", path, None, f"the readers cannot index it: {exc}",
                       "the file is truncated or its tables are damaged: restore it from the source")
        return None


@cache
def decoder_available(name: str) -> bool:
    """Whether this PyAV's FFmpeg has a decoder called ``name``."""
    import av

    try:
        av.codec.Codec(name, "r")
    except Exception:  # UnknownCodecError, or a ValueError from older PyAV
        return False
    return True


def decoders_for(table: SampleTable) -> tuple[str, ...]:
    """The decoders the readers would try for this video, in their order."""
    config = codec_config(table.info)
    if config is not None:
        return config[0]
    return FALLBACK_DECODERS.get(table.info.codec, ())


def check_codec(path: str, table: SampleTable, findings: Findings) -> None:
    codec = table.info.codec
    names = decoders_for(table)
    if any(decoder_available(n) for n in names):
        return
    tried = f"tried {', '.join(names)}" if names else "no FFmpeg decoder is known for it"
    findings.error(
        "codec", path, None,
        f"this machine cannot decode its codec {codec!r} ({tried}; PyAV's FFmpeg has none of them)",
        "install a PyAV build whose FFmpeg has the decoder (the PyPI wheel of av has libdav1d and "
        "h264), or re-encode the video with a codec it has (av1 or h264)",
    )


@dataclass(frozen=True)
class Keyframes:
    """One video's keyframe interval and the random-access cost it implies.

    Args:
        samples: video samples.
        keyframes: sync samples.
        mean_gop: mean frames from one keyframe to the next.
        max_gop: the longest keyframe interval, in frames.
        frames_per_random_frame: mean frames decoded to get one random frame (from its keyframe
            up to it, ``span_mode="minimal"``).
        frames_per_random_gop_span: the same when each GOP is decoded whole (the default
            ``span_mode="gop"``).
    """

    samples: int
    keyframes: int
    mean_gop: float
    max_gop: int
    frames_per_random_frame: float
    frames_per_random_gop_span: float


def keyframes(table: SampleTable) -> Keyframes:
    """Keyframe statistics from the sync-sample table (decode order)."""
    n = len(table)
    syncs = np.asarray(table.sync_index, dtype=np.int64)
    gops = np.diff(np.append(syncs, n)).astype(np.float64)
    return Keyframes(
        samples=n,
        keyframes=len(syncs),
        mean_gop=float(gops.mean()),
        max_gop=int(gops.max()),
        frames_per_random_frame=float((gops * (gops + 1) / 2).sum() / n),
        frames_per_random_gop_span=float((gops * gops).sum() / n),
    )


def check_keyframes(path: str, stats: Keyframes, findings: Findings) -> None:
    if stats.frames_per_random_frame < SLOW_RANDOM_ACCESS_FRAMES:
        return
    findings.warning(
        "keyframes", path, None,
        f"a keyframe every {stats.mean_gop:.1f} frames (longest interval {stats.max_gop}): reading one "
        f"random frame decodes {stats.frames_per_random_frame:.1f} frames on average "
        f"({stats.frames_per_random_gop_span:.1f} with the default span_mode='gop')",
        "for shuffled training re-encode with a short GOP (LeRobot's default g=2), or read with "
        "span_mode='minimal'; sequential reads are not slowed",
    )


def summarise_keyframes(key: str, per_video: list[Keyframes], findings: Findings) -> None:
    """One info line per camera: its keyframe interval and random-access cost over its videos."""
    if not per_video:
        return
    samples = sum(k.samples for k in per_video)
    mean_gop = samples / sum(k.keyframes for k in per_video)
    cost = sum(k.frames_per_random_frame * k.samples for k in per_video) / samples
    cost_gop = sum(k.frames_per_random_gop_span * k.samples for k in per_video) / samples
    findings.info(
        "keyframes", None, None,
        f"{key}: a keyframe every {mean_gop:.1f} frames on average (longest interval "
        f"{max(k.max_gop for k in per_video)}) over {len(per_video)} video(s); one random frame costs "
        f"{cost:.1f} decoded frames ({cost_gop:.1f} with span_mode='gop')",
    )
