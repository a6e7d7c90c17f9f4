"""The `reasoner` console script: one subcommand per stage, options generated from each stage's config."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from reasoner import config as cfg

STAGES = {  # command -> module in pipelines/ with CONFIG, HELP and run_stage(config)
    "init-model": "init_model", "sft": "sft", "curate": "curate", "train": "train", "eval": "eval",
    "report": "report", "run": "run", "verify": "verify", "pairs": "pairs",
}
POSITIONAL = {"report": "run_dir"}  # `reasoner report RUN_DIR`


def _module(name: str):
    import importlib

    return importlib.import_module(f"pipelines.{name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reasoner", description="RL from verifiable rewards on math and code.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--unsafe-no-isolation", action="store_true",
                        help="where Linux namespaces are unavailable, run model-written code anyway, with "
                             "resource limits only (no filesystem, network or process isolation)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, module_name in STAGES.items():
        module = _module(module_name)
        p = sub.add_parser(command, help=module.HELP, description=module.HELP)
        p.set_defaults(module=module_name)
        if command in POSITIONAL:
            p.add_argument(POSITIONAL[command], help="the run directory")
        if command == "run":
            p.add_argument("--config", dest="config_file", help="YAML or JSON file, one section per stage")
            cfg.add_arguments(p, cfg.RunConfig, flatten=False)
        else:
            p.add_argument("--config", dest="config_file", help="YAML or JSON file of this stage's settings")
            cfg.add_arguments(p, module.CONFIG, skip=tuple(POSITIONAL.values()))
    data = sub.add_parser("data", help="dataset tools").add_subparsers(dest="data_command", required=True)
    imp = data.add_parser("import", help="convert a public dataset file into task records")
    imp.add_argument("input", help="input file")
    imp.add_argument("--format", required=True,
                     choices=["gsm8k", "math", "humaneval", "mbpp", "jsonl", "parquet", "csv", "hub"])
    imp.add_argument("--output", required=True)
    cfg.add_arguments(imp, _module("data_import").CONFIG, skip=("format", "input", "output"))
    imp.set_defaults(module="data_import")
    check = data.add_parser("check", help=_module("data_check").HELP)
    cfg.add_arguments(check, _module("data_check").CONFIG)
    check.set_defaults(module="data_check")
    sub.add_parser("verifiers", help="list registered verifier names").set_defaults(module=None)
    return parser


def make_config(args: argparse.Namespace):
    """The stage's config: defaults, then the --config file, then the options given on the command line."""
    kind = _module(args.module).CONFIG
    config_file = getattr(args, "config_file", None)
    config = cfg.from_dict(kind, cfg.load_file(config_file), config_file) if config_file else kind()
    return cfg.apply_overrides(config, args)


def main(argv: list[str] | None = None) -> int:
    from pipelines.common import setup_logging

    args = build_parser().parse_args(argv)
    if args.unsafe_no_isolation:  # read by the sandbox in this process and in every rank it launches
        from sandbox.pool import UNSAFE_ENV

        os.environ[UNSAFE_ENV] = "1"
    if args.command == "verifiers":
        import verifiers

        print("\n".join(verifiers.names()))
        return 0
    config = make_config(args)
    try:
        cfg.validate(config)  # every setting, before any stage spends time or writes a file
    except ValueError as exc:
        print(f"reasoner {args.command}: error: {exc}", file=sys.stderr)
        return 2
    log_dir = Path(config.output) if args.command == "run" else None
    setup_logging(log_dir, args.verbose)
    from data.records import DataError
    from reasoner.monitoring.alarms import AlarmStop
    from reasoner.modeling import ModelDirError
    from sandbox import SandboxUnavailable
    from verifiers import UnknownVerifierError

    try:
        _module(args.module).run_stage(config)
    except (DataError, ModelDirError, UnknownVerifierError, SandboxUnavailable, ValueError, FileNotFoundError) as exc:
        logging.getLogger("reasoner").debug("failed", exc_info=True)
        print(f"reasoner {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except AlarmStop as exc:
        print(f"reasoner {args.command}: error: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
