"""``ernie-bundle``: command line.  Parses arguments, builds the task config, calls the runner."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from pipeline.config import PROJECT_ROOT, known_tasks, load_task_config, parse_override
from pipeline.errors import GateFailed, NoSpace, PipelineError, no_space
from pipeline.graph import STAGE_NAMES, STAGES

DESCRIPTION = """\
Turn a fine-tuned ERNIE/BERT-style Chinese text model into a serving-ready bundle.

Stages (each cached by content; a re-run skips what has not changed):
{stages}
"""

EPILOG = """\
examples:
  ernie-bundle run --task tnews --data-dir ../shared/data/tnews
      train the default small ERNIE (no --model given) and run every stage
  ernie-bundle run --task tnews --model ./my-ernie --until finetune-check
      check a fine-tuned PaddleNLP model directory against the dev set
  ernie-bundle run --task tnews --set finetune.epochs=1 --set gates.min_accuracy=0.4
      override any value of pipeline/tasks/tnews.yaml
  ernie-bundle run --task tnews --act-config pipeline/tasks/act/tnews-prune-quant.yaml
      take the settings of a PaddleSlim auto-compression (ACT) YAML (--set still wins)
  ernie-bundle status --task tnews       what has run, what is stale
  ernie-bundle clean --task tnews --stage finetune

exit codes: 0 ok, 2 bad input, 3 a gate failed, 1 internal error, 130 interrupted
"""


def _stage_lines() -> str:
    return "\n".join(
        f"  {s.name:<15} {s.description}" for s in STAGES
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ernie-bundle",
        description=DESCRIPTION.format(stages=_stage_lines()),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="{run,status,clean,tasks,gate}")

    def task_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--task", required=True, help=f"task name ({', '.join(known_tasks())}) or a YAML file")
        sp.add_argument("--runs-dir", default=str(PROJECT_ROOT / "runs"),
                        help="where stage outputs go (default: ./runs); the bundle goes to package.repository")
        sp.add_argument("--model", help="PaddleNLP model dir or name (default: the task config's; none = scratch model)")
        sp.add_argument("--data-dir", help="the task's data directory: data.train_file, data.dev_file[, labels.json] "
                        "in its data.format (CLUE JSON lines by default; csv, tsv)")
        sp.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a task config value, e.g. finetune.epochs=1 (repeatable)")
        sp.add_argument("--act-config", metavar="PATH",
                        help="a PaddleSlim auto-compression (ACT) YAML, translated into overrides applied before --set "
                             "(a key with no counterpart here is refused by name)")

    r = sub.add_parser("run", help="run the stage graph", formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Run the stages in order, skipping those whose inputs and parameters are unchanged.")
    task_args(r)
    r.add_argument("--from", dest="from_", metavar="STAGE", choices=STAGE_NAMES, help="start at STAGE (earlier stages must be complete)")
    r.add_argument("--until", metavar="STAGE", choices=STAGE_NAMES, help="stop after STAGE")
    r.add_argument("--only", metavar="STAGE", choices=STAGE_NAMES, help="run just STAGE")
    r.add_argument("--force", action="store_true", help="re-run the selected stages even when cached")
    r.add_argument("--max-seq-len", type=int, help="override max_seq_len")
    r.add_argument("--epochs", type=int, help="override finetune.epochs")

    s = sub.add_parser("status", help="show what has run for a task and what is stale")
    task_args(s)
    c = sub.add_parser("clean", help="delete a task's run outputs (all stages, or one)")
    c.add_argument("--task", required=True, help="task name, or a task YAML (its task: name); removes <runs-dir>/<task>")
    c.add_argument("--runs-dir", default=str(PROJECT_ROOT / "runs"))
    which = c.add_mutually_exclusive_group()
    which.add_argument("--stage", choices=STAGE_NAMES, help="only this stage (and its resumable state)")
    which.add_argument("--cache", action="store_true",
                       help="only the run cache (INT8 candidates, pruned models: runs/<task>/cache), not the stages")
    t = sub.add_parser("tasks", help="list the task configs")
    t.add_argument("--name", metavar="TASK", help="print only the name TASK (a task name or a task YAML) stands for: "
                   "what runs/<task> and the bundle's folder are called")
    # Parsed by pipeline.validation.release (see main); declared here so --help lists it.
    sub.add_parser("gate", help="release gate: compare this bundle's validate report with a previous one "
                   "(ernie-bundle gate --task T --baseline PREVIOUS/gates.json; see gate --help)", add_help=False)
    return p


def _config(args: argparse.Namespace):
    overrides, given_by = {}, {}
    if args.act_config:  # first, so --set and the flags below win
        from pipeline.act_config import translate

        overrides.update(translate(args.act_config, task=args.task))
        given_by.update(dict.fromkeys(overrides, Path(args.act_config).name))
    for key, value in map(parse_override, args.overrides):
        overrides[key], given_by[key] = value, "--set"
    flags = {}
    if args.model is not None:
        flags["model.name_or_path"] = ("--model", args.model or None)
    if args.data_dir is not None:
        flags["data.dir"] = ("--data-dir", str(Path(args.data_dir).expanduser().resolve()) if args.data_dir else None)
    if getattr(args, "max_seq_len", None) is not None:
        flags["max_seq_len"] = ("--max-seq-len", args.max_seq_len)
    if getattr(args, "epochs", None) is not None:
        flags["finetune.epochs"] = ("--epochs", args.epochs)
    for key, (flag, value) in flags.items():
        overrides[key], given_by[key] = value, flag
    cfg = load_task_config(args.task, overrides, given_by)
    if args.model is None and cfg.model.if_missing == "scratch" and cfg.model.missing_directory():
        print(f"note: model {cfg.model.name_or_path} is not on this machine: training the small scratch model "
              "instead (MODEL=<dir> picks a model)", file=sys.stderr)
        cfg = load_task_config(args.task, {**overrides, "model.name_or_path": None}, given_by)
    return cfg


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "gate":
        from pipeline.validation.release import main as gate_main

        return gate_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return _dispatch(args)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("\ninterrupted: nothing was marked complete; run the same command again to resume", file=sys.stderr)
        return 130
    except OSError as exc:  # outside a stage (the lock, a record): a full disk is said as such, anything else raised
        full = no_space(exc, getattr(args, "runs_dir", "."))
        if full is None:
            raise
        print(f"error: {full}", file=sys.stderr)
        return NoSpace.exit_code


def _dispatch(args: argparse.Namespace) -> int:
    from pipeline.runner import Runner, format_table, select_stages

    if args.command == "tasks":
        if args.name is not None:
            from pipeline.config import check_task_name, task_name

            print(check_task_name(task_name(args.name), "--name"))
            return 0
        return _tasks()
    if args.command == "clean":
        return _clean(args)
    cfg = _config(args)
    runner = Runner(cfg, Path(args.runs_dir))
    if args.command == "status":
        from pipeline.run_lock import lock_holder

        print(f"task {cfg.task}: {runner.runs_dir}")
        holder = lock_holder(runner.runs_dir)  # status only reads: it never waits for a run
        if holder is not None:
            print(f"a run is in progress (pid {holder or 'unknown'}): these records may change while you read them")
        print(format_table(runner.status_rows(), runner.phases()))
        _print_cache(runner.runs_dir)
        return 0
    selected = select_stages(args.from_, args.until, args.only)
    print(f"task {cfg.task}: stages {' -> '.join(selected)}; outputs in {runner.runs_dir}", flush=True)
    if "package" in selected:  # not under --runs-dir: say where the bundle will replace what is there
        from pipeline.stages.package import repository_dir

        print(f"the bundle goes to {repository_dir(cfg) / cfg.task} (package.repository; --set "
              "package.repository=DIR to write it elsewhere)", flush=True)
    try:
        summary = runner.run(selected, force=args.force)
    except GateFailed:
        print(format_table(runner.status_rows(), runner.phases()), file=sys.stderr)
        raise
    print()
    print(format_table(summary.rows, runner.phases()))
    return 0


def _tasks() -> int:
    """List the task configs; a broken one is named with its error (exit 2), the others still listed."""
    broken = 0
    for name in known_tasks():
        try:
            print(f"{name:<13} {load_task_config(name).description}")
        except PipelineError as exc:
            broken += 1
            print(f"{name:<13} error: pipeline/tasks/{name}.yaml: {exc}")
    return 2 if broken else 0


def _print_cache(runs_dir: Path) -> None:
    from pipeline.run_cache import RunCache

    parts = RunCache(runs_dir).summary()
    if parts:
        print(f"\nrun cache {runs_dir / 'cache'} (reused by later runs; clean --cache removes it):")
        for part in parts:
            print(f"  {part.line()}")


def _clean(args: argparse.Namespace) -> int:
    """Remove ``<runs-dir>/<task>`` (or one stage of it).  Only a plain task name's directory that a run of ours made
    (it carries a run's mark, ``run_lock.is_runs_dir``) and that holds only what runs write (``run_lock.foreign_entry``:
    a forged mark, or a user's file beside a real one, keeps it), never through a symbolic link and never while a run
    holds it: `--task ..`, `--task /`, a mistyped --runs-dir or a project folder that happens to have an ``export/``
    must not be deleted."""
    from pipeline.config import check_task_name, task_name
    from pipeline.errors import UserInputError
    from pipeline.run_cache import CACHE
    from pipeline.run_lock import MARKER_NAME, foreign_entry, is_runs_dir, run_lock

    task = check_task_name(task_name(args.task), "--task")  # as run and status read --task: a YAML's task name
    task_dir = Path(args.runs_dir).expanduser() / task
    victim = task_dir / args.stage if args.stage else task_dir / CACHE if args.cache else task_dir
    for p in (task_dir, victim):
        if p.is_symlink():
            raise UserInputError(f"{p} is a symbolic link: clean neither follows nor removes it")
        if not p.exists():
            print(f"nothing to remove at {victim}")
            return 0
        if not p.is_dir():
            raise UserInputError(f"{p} is not a directory: clean removes only a task's runs directory")
    if not is_runs_dir(task_dir):
        if any(task_dir.iterdir()):
            raise UserInputError(f"{task_dir} is not a runs directory made by ernie-bundle (no {MARKER_NAME} in it): "
                                 "not removing it; check --runs-dir and --task")
        task_dir.rmdir()  # empty: nothing of anyone's to lose
        print(f"removed {task_dir}")
        return 0

    def refuse_foreign() -> None:
        foreign = foreign_entry(task_dir, victim)
        if foreign is not None:
            raise UserInputError(f"{task_dir} holds {foreign.relative_to(task_dir)}, which no ernie-bundle run writes: "
                                 f"not removing {victim}; move it away first (or check --runs-dir and --task)")

    refuse_foreign()  # before the lock too: nothing (not even a lock file) is added to a folder that is not ours
    with run_lock(task_dir, doing=f"clean {victim}"):
        refuse_foreign()  # and under it: no run adds to it meanwhile
        try:
            shutil.rmtree(victim)
        except OSError as exc:
            raise UserInputError(f"cannot remove {victim}: {exc.strerror or exc}") from None
    print(f"removed {victim}")
    return 0
