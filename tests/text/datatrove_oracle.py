"""Run inside the datatrove side venv (datatrove's pins stay out of feedline's venv).

``tokenize DOCS_FILE TOKENIZER OUT [loss]``: datatrove's own DocumentTokenizer (no shuffle) over one
JSON-lines file, printing the path of the ``.ds`` it wrote (with ``loss``: ``save_loss_metadata``,
its ``.ds.loss`` from each document's ``no_loss_ranges``).
``windows FOLDER SEQ_LEN OUT.npz``: every window DatatroveFileDataset cuts from each ``.ds`` of
FOLDER (sorted by name), with positions from the index, saved as arrays.
``bench DOCS_GLOB_FOLDER TOKENIZER OUT``: DocumentTokenizer over a folder, printing CPU seconds.
"""

from __future__ import annotations

import glob
import os
import resource
import sys
import time

import numpy as np


def _tokenize(docs: str, tokenizer: str, out: str, glob_pattern: str | None = None, loss: bool = False) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    folder, name = (docs, glob_pattern) if glob_pattern else (os.path.dirname(docs), os.path.basename(docs))
    LocalPipelineExecutor(
        pipeline=[
            JsonlReader(folder, glob_pattern=name, add_file_path=False),
            DocumentTokenizer(out, tokenizer_name_or_path=tokenizer, eos_token="<|endoftext|>",
                              shuffle_documents=False, batch_size=1024, save_loss_metadata=loss),
        ],
        tasks=1, workers=1, logging_dir=os.path.join(out, ".logs"), skip_completed=False,
    ).run()


def main() -> None:
    command = sys.argv[1]
    if command == "tokenize":
        docs, tokenizer, out = sys.argv[2:5]
        _tokenize(docs, tokenizer, out, loss=sys.argv[5:6] == ["loss"])
        print("\n".join(sorted(glob.glob(os.path.join(out, "**", "*.ds"), recursive=True))))
    elif command == "windows":
        from datatrove.utils.dataset import DatatroveFileDataset

        folder, seq_len, out = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        ids, pos = [], []
        for path in sorted(glob.glob(os.path.join(folder, "*.ds"))):
            ds = DatatroveFileDataset(path, seq_len, token_size=2, return_positions=True)
            for i in range(len(ds)):
                item = ds[i]
                ids.append(item["input_ids"].numpy())
                pos.append(item["positions"].numpy().astype(np.int64))
        np.savez(out, input_ids=np.stack(ids), positions=np.stack(pos))
    elif command == "bench":
        folder, tokenizer, out = sys.argv[2:5]
        started = time.process_time()
        wall = time.perf_counter()
        _tokenize(folder, tokenizer, out, glob_pattern="*.jsonl*")
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = time.process_time() - started + usage.ru_utime + usage.ru_stime
        print(f"{cpu:.3f} {time.perf_counter() - wall:.3f}")
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
