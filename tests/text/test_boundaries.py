"""Document boundaries in every window: ``positions``, ``sequence_id``, ``cu_seqlens`` and the
loss-mask options, read from ``.ds.index``, equal what an independent computation from the token
ids gives (llm-foundry's separator cumsum, Megatron's ``data == eod`` mask); and SDPA with
``document_mask`` equals attention computed one document at a time."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from feedline.streaming.errors import StreamingError
from feedline.text import TokenDataset
from feedline.text.boundaries import (
    distinct_ends,
    document_mask,
    document_starts,
    flat_cu_seqlens,
    window_loss_mask,
)
from feedline.text.errors import TextError

SEQ = 31


def _eos(root) -> int:
    return json.loads((root / "manifest.json").read_text())["tokenizer"]["eos_id"]


def foundry_sequence_id(ids: np.ndarray, sep: int, boundary: str) -> np.ndarray:
    """llm-foundry's ``get_sequence_id_from_batch`` on one row, numbered from 0."""
    cumulative = np.cumsum(ids == sep)
    sid = cumulative if boundary == "bos" else np.concatenate(([0], cumulative[:-1]))
    return sid - sid[0]


def positions_of(sid: np.ndarray) -> np.ndarray:
    out = np.zeros(sid.size, np.int64)
    for p in range(1, sid.size):
        out[p] = 0 if sid[p] != sid[p - 1] else out[p - 1] + 1
    return out


def cu_of(sid: np.ndarray) -> list[int]:
    return [p for p in range(sid.size) if p == 0 or sid[p] != sid[p - 1]] + [sid.size]


@pytest.mark.parametrize("boundary", ["eos", "bos"])
@pytest.mark.parametrize("labels", [False, True])
def test_boundaries_equal_a_computation_from_the_token_ids(tokens_root, boundary, labels):
    eos = _eos(tokens_root)
    ds = TokenDataset(tokens_root, SEQ, labels=labels, boundary=boundary, return_positions=True,
                      return_sequence_id=True, return_cu_seqlens=True)
    crossing = 0
    n = SEQ if labels else SEQ + 1
    for item in ds:
        ids = item["input_ids"].numpy()
        sid = foundry_sequence_id(ids, eos, boundary)
        assert item["sequence_id"].numpy().tolist() == sid.tolist()
        assert item["positions"].numpy().tolist() == positions_of(sid).tolist()
        cu = cu_of(sid)
        assert item["cu_seqlens_count"] == len(cu)
        assert item["cu_seqlens"].dtype == torch.int32 and item["cu_seqlens"].shape == (n + 1,)
        assert item["cu_seqlens"].tolist() == cu + [n] * (n + 1 - len(cu))
        crossing += len(cu) >= 4  # three documents or more in one window
    assert crossing > 20


def test_eos_positions_are_datatroves_either_way(tokens_root):
    """The boundary path gives the positions the plain path (datatrove's) gives."""
    plain = {int(i["window_index"]): i["positions"] for i in TokenDataset(tokens_root, SEQ, return_positions=True,
                                                                          return_index=True)}
    both = TokenDataset(tokens_root, SEQ, return_positions=True, return_sequence_id=True, return_index=True)
    for item in both:
        assert torch.equal(item["positions"], plain[int(item["window_index"])])


@pytest.mark.parametrize("boundary", ["eos", "bos"])
def test_loss_options_equal_megatron_and_document_starts_from_the_ids(tokens_root, boundary):
    eos = _eos(tokens_root)
    after = TokenDataset(tokens_root, SEQ, labels=True, return_loss_mask=True, mask_after_eos=True,
                         boundary=boundary, return_index=True)
    start = TokenDataset(tokens_root, SEQ, labels=True, return_loss_mask=True, mask_document_start=True,
                         boundary=boundary, return_index=True, ignore_index=-100)
    starts = {int(i["window_index"]): i for i in start}
    for item in after:
        ids, labels = item["input_ids"].numpy(), item["labels"].numpy()
        assert item["loss_mask"].numpy().tolist() == (ids != eos).tolist()  # Megatron: loss_mask[data == eod] = 0
        other = starts[int(item["window_index"])]
        first = (ids == eos) if boundary == "eos" else (labels == eos)  # a target that opens a document
        assert other["loss_mask"].numpy().tolist() == (~first).tolist()
        assert other["labels"].numpy().tolist() == np.where(first, -100, labels).tolist()


def test_sdpa_with_the_document_mask_equals_attention_per_document(tokens_root):
    n = 127  # long enough that every row crosses documents
    ds = TokenDataset(tokens_root, n, labels=True, return_sequence_id=True, return_cu_seqlens=True, seed=5)
    loader = DataLoader(ds, batch_size=4, num_workers=0)  # the default collate stacks every field
    batch = next(iter(ds.track(loader)))
    sid = batch["sequence_id"]
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 2, n, 8, generator=generator) for _ in range(3))
    masked = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(sid))
    assert document_mask(sid).shape == (4, 1, n, n) and document_mask(sid[0]).shape == (n, n)
    separate = torch.empty_like(q)
    documents = 0
    for b in range(4):
        cu = batch["cu_seqlens"][b, : int(batch["cu_seqlens_count"][b])].tolist()
        for lo, hi in zip(cu, cu[1:], strict=False):
            separate[b, :, lo:hi] = torch.nn.functional.scaled_dot_product_attention(
                q[b, :, lo:hi], k[b, :, lo:hi], v[b, :, lo:hi], is_causal=True)
            documents += 1
    assert documents >= 8  # the batch crosses documents
    torch.testing.assert_close(masked, separate, atol=1e-5, rtol=1e-5)
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.allclose(plain, separate, atol=1e-3)  # the mask changed something

    flat, longest = flat_cu_seqlens(batch["cu_seqlens"], batch["cu_seqlens_count"])
    rows = sid + torch.arange(4).unsqueeze(1) * (n + 1)  # distinct ids per row, flattened
    expected = cu_of(rows.reshape(-1).numpy())
    assert flat.dtype == torch.int32 and flat.tolist() == expected
    assert longest == max(b - a for a, b in zip(expected, expected[1:], strict=False))


def test_boundaries_by_hand_with_an_empty_document_and_the_file_start():
    ends = np.array([3, 5, 5, 9, 12])  # a document of no tokens between 5 and 5
    assert distinct_ends(ends).tolist() == [3, 5, 9, 12]
    ends = distinct_ends(ends)
    assert document_starts(ends, 0, 12).tolist() == [0, 3, 5, 9]
    assert document_starts(ends, 3, 6).tolist() == [0, 2]  # a window starting on a boundary
    assert document_starts(ends, 0, 12, "bos").tolist() == [0, 2, 4, 8, 11]
    mask = window_loss_mask(None, ends, 0, 12, document_start=True).astype(int).tolist()
    assert mask == [0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 1, 1]
    stored = np.ones(12, bool)
    stored[1] = False
    mask = window_loss_mask(stored, ends, 0, 12, after_eos=True, document_start=True, boundary="bos")
    assert mask.astype(int).tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0]


def test_options_that_mean_nothing_are_one_line_errors(tokens_root):
    with pytest.raises(TextError, match="ignore_index masks labels: give labels=True"):
        TokenDataset(tokens_root, SEQ, ignore_index=-100)
    with pytest.raises(TextError, match="give return_loss_mask=True or ignore_index"):
        TokenDataset(tokens_root, SEQ, mask_after_eos=True)
    with pytest.raises(StreamingError, match="boundary must be 'eos'"):
        TokenDataset(tokens_root, SEQ, boundary="start")
