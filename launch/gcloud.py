"""Every gcloud command `bert-jax launch` runs, built as an argv list (never a shell string).

Flags as documented in the gcloud reference for `compute tpus tpu-vm {create,describe,ssh,
delete}` and `compute tpus queued-resources {create,describe,delete}`.
"""

from launch.job import Job

TPU_VM = ["gcloud", "compute", "tpus", "tpu-vm"]
QUEUED_RESOURCES = ["gcloud", "compute", "tpus", "queued-resources"]


def _location(job: Job) -> list[str]:
    return [f"--zone={job.zone}", f"--project={job.project}"]


def create_node(job: Job) -> list[str]:
    """Creates the slice directly; gcloud waits until it is READY or fails (quota, capacity)."""
    argv = TPU_VM + ["create", job.name, *_location(job),
                     f"--accelerator-type={job.accelerator.name}",
                     f"--version={job.runtime_version}"]
    return argv + (["--spot"] if job.spot else [])


def create_queued(job: Job) -> list[str]:
    """Queues a request for the slice: it waits for capacity instead of failing on a stockout."""
    argv = QUEUED_RESOURCES + ["create", job.name, *_location(job),
                               f"--accelerator-type={job.accelerator.name}",
                               f"--runtime-version={job.runtime_version}",
                               f"--node-id={job.name}"]
    return argv + (["--spot"] if job.spot else [])


def describe_node(job: Job) -> list[str]:
    """Prints the node's state alone: READY, CREATING, PREEMPTED, TERMINATED, ..."""
    return TPU_VM + ["describe", job.name, *_location(job), "--format=value(state)"]


def describe_queued(job: Job) -> list[str]:
    """Prints the queued resource's state: WAITING_FOR_RESOURCES, ACTIVE, SUSPENDED, ..."""
    return QUEUED_RESOURCES + ["describe", job.name, *_location(job),
                               "--format=value(state.state)"]


def ssh(job: Job, remote_command: str, worker: str = "all") -> list[str]:
    """Runs `remote_command` (already quoted for a remote bash) on one worker or on all."""
    return TPU_VM + ["ssh", job.name, *_location(job), f"--worker={worker}",
                     f"--command={remote_command}"]


def delete_node(job: Job) -> list[str]:
    return TPU_VM + ["delete", job.name, *_location(job), "--quiet"]


def delete_queued(job: Job) -> list[str]:
    """--force deletes the queued resource's node first, so one call frees everything."""
    return QUEUED_RESOURCES + ["delete", job.name, *_location(job), "--force", "--quiet"]


def list_storage(path: str) -> list[str]:
    """Lists a gs:// folder: the logs the workers copied there outlive the slice."""
    return ["gcloud", "storage", "ls", "--long", path]
