"""``feedline tokenize``: documents (any store, any form curate reads) to datatrove's token files."""

from __future__ import annotations

import argparse

from feedline.text.errors import TextError
from feedline.validate import check_int


def cmd_tokenize(args: argparse.Namespace) -> int:
    from feedline.text.shard import TokenizeJob
    from feedline.text.tokenize import run_tokenize
    from feedline.text.tokenizer import load_tokenizer

    check_int("--processes", args.processes, minimum=1, error=TextError)
    check_int("--batch-size", args.batch_size, minimum=1, error=TextError)
    tokenizer = load_tokenizer(args.tokenizer, args.eos_token)
    job = TokenizeJob(tokenizer, shuffle_seed=args.shuffle_documents, text_field=args.text_field,
                      batch_size=args.batch_size, loss_field=args.loss_mask, loss_spans=args.loss_spans)
    report = run_tokenize(args.documents, job, args.out, metadata=args.metadata,
                          processes=args.processes, executor=args.executor,
                          ray_address=args.ray_address, retries=args.retries)
    print(report.summary())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tokenize", help="tokenize documents into datatrove's .ds/.ds.index layout, resumably",
        description="Tokenize JSON-lines documents (.jsonl, .gz, .zst; local, S3 or HTTP) with a Hugging Face "
                    "tokenizer into one .ds token file, .ds.index and .ds.metadata per input shard "
                    "(datatrove's layout), plus manifest.json. Finished shards are skipped on a rerun.",
    )
    p.add_argument("documents", nargs="+", metavar="DOCS_GLOB", help="document files, globs or folders")
    p.add_argument("--tokenizer", required=True, metavar="PATH", help="a tokenizer.json (or its folder), or a Hub name")
    p.add_argument("--out", required=True, metavar="DIR", help="the output folder (local)")
    p.add_argument("--eos-token", metavar="TOKEN",
                   help="the token appended to every document (default: the tokenizer's own end-of-text token)")
    p.add_argument("--shuffle-documents", type=int, metavar="SEED",
                   help="shuffle documents within each shard with this seed (default: input order)")
    p.add_argument("--text-field", default="text", help="the JSON field holding the text (default text)")
    p.add_argument("--loss-mask", metavar="FIELD",
                   help="also write X.ds.loss (one byte a token) from this JSON field: true/false for the whole "
                        "document, or a list of [start, end] character spans (default: none written)")
    p.add_argument("--loss-spans", choices=("train", "ignore"), default="train",
                   help="--loss-mask spans are the text trained on (train, the default) or the text "
                        "not trained on (ignore, datatrove's no_loss_ranges)")
    p.add_argument("--batch-size", type=int, default=1024, help="documents per encode_batch call (default 1024)")
    p.add_argument("--processes", type=int, default=1, help="worker processes (default 1: in this process)")
    p.add_argument("--executor", choices=("local", "ray"), default="local", help="where tasks run (default local)")
    p.add_argument("--ray-address", help="Ray cluster address for --executor ray (default: a local instance)")
    p.add_argument("--metadata", metavar="DIR", help="where .done markers go (default <out>/.feedline-tokenize)")
    p.add_argument("--retries", type=int, default=0, help="extra attempts after a retryable read failure (default 0)")
    p.set_defaults(func=cmd_tokenize)
