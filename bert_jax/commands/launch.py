"""`bert-jax launch`: TPU VM jobs from a job file, and a local rehearsal of a pod run.

Thin: the work lives in `launch/`, which imports no JAX, so these commands start at once.
"""

import argparse

HELP = "create, set up, run, watch and delete a TPU VM job; or rehearse a pod run locally"
DESCRIPTION = """\
Runs `bert-jax pretrain` on a Cloud TPU VM slice described by a job file (TOML; see
launch/jobs/ for examples), or rehearses a multi-host run on this machine.

A pod run, step by step:
  bert-jax launch check  JOB.toml   read the job's vocabulary and shards, trace its train
                                    step for the slice's devices: seconds, on this machine
  bert-jax launch create JOB.toml   check, then rent the slice (on demand, spot, or queued)
  bert-jax launch setup  JOB.toml   install the code on every worker
  bert-jax launch run    JOB.toml   start pretrain on every worker, detached; after a
                                    preemption, re-creates the slice and resumes
  bert-jax launch logs   JOB.toml   follow worker 0's log
  bert-jax launch status JOB.toml   READY, PREEMPTED, ...
  bert-jax launch stop   JOB.toml   checkpoint and stop the run; the slice stays
  bert-jax launch delete JOB.toml   give the slice back (the gs:// workdir stays)
Every cloud action takes --dry-run: print the gcloud commands instead of running them.
`create` and `run` run `check` first (unless --skip-check or --dry-run); the config and
its overrides are loaded in any case.

Rehearsal: bert-jax launch local --processes 2 --devices-per-process 4 --config configs/demo.py
"""
TAKES_OVERRIDES = True  # `launch local` passes --config.key=value on to pretrain

_CLOUD_ACTIONS = {
    "create": "rent the TPU slice described by the job file",
    "setup": "clone and install the job's code revision on every worker",
    "run": "start the job on every worker (re-creating a preempted slice first)",
    "logs": "follow a worker's log (after the slice is gone: list the copies in the workdir)",
    "status": "print the slice's state (READY, PREEMPTED, ...)",
    "stop": "ask the run to checkpoint and exit on every worker; the slice keeps running",
    "delete": "delete the slice (and its queued resource); the gs:// workdir is kept",
}


_CHECK_HELP = ("before renting: load each job's pretrain config with its overrides, read its "
               "vocabulary, shard manifest and first records from the job's paths, build the "
               "mesh over the slice's device count and trace the train step for it")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help=_CHECK_HELP, description=_CHECK_HELP + (
        ". The devices are simulated on the CPU; nothing is compiled or rented. Exits "
        "non-zero naming the first problem of each job that would fail on the pod."))
    check.add_argument("jobs", metavar="JOB.toml", nargs="+", help="job files (TOML)")
    for name, help_text in _CLOUD_ACTIONS.items():
        action = actions.add_parser(name, help=help_text, description=help_text)
        action.add_argument("job", metavar="JOB.toml", help="the job file (TOML)")
        action.add_argument("--dry-run", action="store_true",
                            help="print the gcloud commands, one per line, instead of running them")
        if name in ("create", "run"):
            action.add_argument("--skip-check", action="store_true",
                                help="do not read the data or trace the train step first (the "
                                     "config and its overrides are still loaded)")
        if name == "logs":
            action.add_argument("--worker", type=int, default=0,
                                help="which worker's log to follow (default: 0)")
            action.add_argument("--lines", type=int, default=100,
                                help="lines of history to print before following (default: 100)")
    local = actions.add_parser(
        "local", help="rehearse a multi-host run: N pretrain processes on this machine",
        description="Runs N `bert-jax pretrain` processes joined by jax.distributed on "
                    "127.0.0.1, each with its own simulated CPU devices; extra "
                    "--config.key=value arguments go to every process.")
    local.add_argument("--config", required=True, help="the pretrain run config (configs/NAME.py)")
    local.add_argument("--workdir", default="runs/local-rehearsal",
                       help="training work directory shared by the processes; running again "
                            "resumes from its newest checkpoint (default: runs/local-rehearsal)")
    local.add_argument("--processes", type=int, default=2,
                       help="number of processes, i.e. simulated hosts (default: 2)")
    local.add_argument("--devices-per-process", type=int, default=4,
                       help="simulated CPU devices in each process (default: 4)")


def run(args: argparse.Namespace) -> int:
    from bert_jax.errors import UserError  # light: stdlib only

    if args.action == "local":
        from launch.local import run_local
        return run_local(args.config, args.workdir, args.overrides, args.processes,
                         args.devices_per_process)
    if args.overrides:
        raise UserError(f"unrecognized arguments for launch {args.action}: "
                        f"{' '.join(args.overrides)} (job settings live in the job file)")
    from launch import actions
    from launch.job import load_job
    from launch.runner import CommandRunner

    if args.action == "check":
        from launch.check import check_jobs
        check_jobs([load_job(path) for path in args.jobs])
        print("bert-jax launch check: every job passed", flush=True)
        return 0
    job = load_job(args.job)
    runner = CommandRunner(dry_run=args.dry_run)
    if args.action == "logs":
        actions.logs(job, runner, worker=args.worker, lines=args.lines)
    elif args.action in ("create", "run"):
        actions.ACTIONS[args.action](job, runner, check=not args.skip_check)
    else:
        actions.ACTIONS[args.action](job, runner)
    return 0
