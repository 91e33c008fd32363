"""What each Cloud TPU generation is: hosts, chips, cores, memory and peak speed.

One table, shared by `bert-jax launch` (how many workers a slice has) and `bert-jax aot`
(memory per device, peak FLOP/s). Pure Python: `launch/` imports no JAX.

Sources (Cloud TPU system architecture pages, cloud.google.com/tpu/docs/system-architecture-tpu-vm
and the per-version pages v2, v3, v4, v5e, v5p, v6e):
- v2: 4 chips per host, 2 TensorCores per chip, 16 GiB HBM per chip, 45 bf16 TFLOP/s per chip.
- v3: 4 chips per host, 2 TensorCores per chip, 32 GiB HBM per chip (16 GiB per core),
  123 bf16 TFLOP/s per chip. "v3-N" counts TensorCores, so v3-64 is 32 chips on 8 hosts.
- v4: 4 chips per host, 2 TensorCores per chip fused as one "megacore" device, 32 GiB HBM,
  275 bf16 TFLOP/s per chip. "v4-N" counts TensorCores: v4-64 is 32 chips on 8 hosts.
- v5e ("v5litepod-N"): 1 TensorCore per chip, 16 GiB HBM, 197 bf16 TFLOP/s per chip. N counts
  chips; slices of up to 8 chips are one host, larger ones have 4 chips per host, so
  v5litepod-256 has 64 hosts.
- v5p: 4 chips per host, 2 TensorCores per chip (megacore), 95 GiB HBM, 459 bf16 TFLOP/s per
  chip. "v5p-N" counts TensorCores.
- v6e (Trillium, "v6e-N"): 1 TensorCore per chip, 32 GiB HBM, 918 bf16 TFLOP/s per chip. N counts
  chips; up to 8 chips are one host, larger slices have 4 chips per host.

Bandwidths, for `bert-jax aot`'s roofline bound (same pages, "key specifications"):
- HBM bandwidth per chip: v3 900 GB/s, v4 1200 GB/s, v5e 819 GB/s, v5p 2765 GB/s, v6e 1638 GB/s;
  the v2 page gives none (0: no memory term).
- Interconnect (ICI) bandwidth per chip that a collective can use: the pages' "all-reduce
  bandwidth per Pod" over the Pod's chips, v3 340 TB/s / 1024 = 332 GB/s, v4 1.1 PB/s / 4096 =
  269 GB/s, v5e 51.2 TB/s / 256 = 200 GB/s, v6e 102.4 TB/s / 256 = 400 GB/s. v5p's page gives
  no Pod all-reduce figure; its bidirectional ICI bandwidth per chip is 1200 GB/s, and on v5e
  and v6e the all-reduce figure is half the bidirectional one (400 -> 200, 800 -> 400), so
  600 GB/s. v2: none given (0: no interconnect term).
"""

import dataclasses
import re

from bert_jax.errors import UserError

GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class TpuGeneration:
    name: str  # the accelerator-type prefix gcloud uses: "v4", "v5litepod", ...
    topology_name: str  # the prefix libtpu's topology strings use: "v4", "v5e", ...
    device_kind: str  # jax `Device.device_kind` of its devices
    cores_per_chip: int  # TensorCores on one chip
    type_counts_cores: bool  # True: the N of "vX-N" counts TensorCores; False: chips
    chips_per_host: int  # chips attached to one TPU VM worker in a multi-host slice
    single_host_chips: int  # slices up to this many chips are one host
    hbm_bytes_per_chip: int  # high-bandwidth memory of one chip
    peak_bf16_flops_per_chip: float  # dense bf16 matrix-unit peak of one chip
    devices_per_chip: int  # JAX devices per chip: 2 on v2/v3 (one per core), 1 with megacore
    hbm_bytes_per_second_per_chip: float  # HBM bandwidth (0 = not published)
    interconnect_bytes_per_second_per_chip: float  # ICI bandwidth for collectives (0 = unknown)


GENERATIONS = {
    generation.name: generation for generation in (
        TpuGeneration("v2", "v2", "TPU v2", 2, True, 4, 4, 16 * GIB, 45e12, 2, 0.0, 0.0),
        TpuGeneration("v3", "v3", "TPU v3", 2, True, 4, 4, 32 * GIB, 123e12, 2, 900e9,
                      340e12 / 1024),
        TpuGeneration("v4", "v4", "TPU v4", 2, True, 4, 4, 32 * GIB, 275e12, 1, 1200e9,
                      1.1e15 / 4096),
        TpuGeneration("v5litepod", "v5e", "TPU v5 lite", 1, False, 4, 8, 16 * GIB, 197e12, 1,
                      819e9, 51.2e12 / 256),
        TpuGeneration("v5p", "v5p", "TPU v5", 2, True, 4, 4, 95 * GIB, 459e12, 1, 2765e9,
                      1200e9 / 2),
        TpuGeneration("v6e", "v6e", "TPU v6 lite", 1, False, 4, 8, 32 * GIB, 918e12, 1,
                      1638e9, 102.4e12 / 256),
    )
}
# Names people write for the same accelerator types.
_ALIASES = {"v5e": "v5litepod"}


@dataclasses.dataclass(frozen=True)
class AcceleratorType:
    """A slice such as "v4-64": its generation and size."""
    generation: TpuGeneration
    size: int  # the N of "vX-N"

    @property
    def name(self) -> str:
        """The spelling gcloud accepts for `--accelerator-type`."""
        return f"{self.generation.name}-{self.size}"

    @property
    def num_chips(self) -> int:
        cores_per_chip = self.generation.cores_per_chip if self.generation.type_counts_cores else 1
        return self.size // cores_per_chip

    @property
    def num_devices(self) -> int:
        """`jax.device_count()` on the whole slice: the devices a run config's mesh covers."""
        return self.num_chips * self.generation.devices_per_chip

    @property
    def num_workers(self) -> int:
        """TPU VM hosts in the slice: `--worker=all` reaches this many machines."""
        if self.num_chips <= self.generation.single_host_chips:
            return 1
        return self.num_chips // self.generation.chips_per_host


def parse_accelerator_type(text: str, source: str = "accelerator type") -> AcceleratorType:
    """Parses "v3-64", "v4-64", "v5litepod-256" (or "v5e-256"), "v5p-128", "v6e-64"."""
    match = re.fullmatch(r"(v\d+[a-z]*)-(\d+)", text.strip())
    expected = ("expected GENERATION-SIZE with GENERATION one of "
                f"{sorted(GENERATIONS)} (or v5e), e.g. v3-64, v4-64, v5litepod-256")
    if not match:
        raise UserError(f"{source}: cannot read accelerator type {text!r}; {expected}")
    name = _ALIASES.get(match.group(1), match.group(1))
    if name not in GENERATIONS:
        raise UserError(f"{source}: unknown TPU generation in {text!r}; {expected}")
    generation, size = GENERATIONS[name], int(match.group(2))
    accelerator = AcceleratorType(generation, size)
    cores_per_chip = generation.cores_per_chip if generation.type_counts_cores else 1
    whole_hosts = (accelerator.num_chips <= generation.single_host_chips
                   or accelerator.num_chips % generation.chips_per_host == 0)
    if size % cores_per_chip or accelerator.num_chips < 1 or not whole_hosts:
        raise UserError(f"{source}: {text!r} is not a slice size Cloud TPU offers; {expected}")
    return accelerator


def generation_for_device_kind(device_kind: str) -> TpuGeneration:
    """The generation whose devices report `device_kind` (e.g. "TPU v5 lite")."""
    for generation in GENERATIONS.values():
        if generation.device_kind == device_kind:
            return generation
    raise UserError(f"no TPU generation has device kind {device_kind!r}; "
                    f"known: {[g.device_kind for g in GENERATIONS.values()]}")
