"""torch.tpu.distributed: the "tpu_dist" process group and the chips' topology.

The backend is the runtime's collectives (runtime/dist, C) behind a thin c10d Backend (torch_tpu/csrc/dist.cpp),
registered for the "tpu" device, so `init_process_group("tpu_dist")`, `init_process_group(device_id=...)` and
`init_device_mesh("tpu", ...)` pick it. The topology helpers read TORCH_TPU_TOPOLOGY (README, "Several chips").
"""
import os

import torch

__all__ = ["topology_aware_mesh", "Topology", "topology", "register_backend"]


class Topology:
    """A host's chips as a torus: `dims` (x first), chip ids run x fastest. `coords(chip)` gives a chip's
    coordinates, `neighbors(chip)` the chips one link away (wrap-around links included)."""

    def __init__(self, spec: str):
        self.spec = str(spec)
        self.dims = _parse_dims(self.spec)
        self.num_chips = 1
        for d in self.dims:
            self.num_chips *= d

    def coords(self, chip: int) -> tuple:
        from torch_tpu import _C
        return tuple(_C._dist_topology_coords(self.spec, int(chip)))

    def neighbors(self, chip: int) -> list:
        from torch_tpu import _C
        return list(_C._dist_topology_neighbors(self.spec, int(chip)))

    def __repr__(self):
        return f"Topology('{self.spec}', dims={self.dims}, num_chips={self.num_chips})"


def _parse_dims(spec):
    from torch_tpu import _C
    _C._dist_topology_coords(spec, 0)  # the runtime's parser validates (and names what is wrong)
    return tuple(int(p) for p in spec.lower().split("x"))


def topology() -> Topology:
    """This host's topology (TORCH_TPU_TOPOLOGY; one chip when unset)."""
    return Topology(os.environ.get("TORCH_TPU_TOPOLOGY") or "1")


def topology_aware_mesh(mesh_shape, *, topology=None, dcn_mesh_shape=None, process_is_granule=False,
                        allow_split_physical_axes=False, contiguous_submeshes=False) -> torch.Tensor:
    """The int64 rank layout to pass to `DeviceMesh("tpu", mesh=...)`: the product of `mesh_shape` is a host's chips,
    the last mesh dimension runs along physical neighbours (a ring along a torus axis where the axes allow), and
    `dcn_mesh_shape` (same length) puts hosts outside: dimension i gets dcn_mesh_shape[i] * mesh_shape[i] entries,
    host h holding ranks h * chips .. (h + 1) * chips - 1. `topology`: "2x2", a Topology, or None for this host's.
    As TorchTPU's (JAX's create_device_mesh): `allow_split_physical_axes=False` refuses a layout that would spread one
    physical axis over two mesh dimensions (ValueError; True allows it); `process_is_granule=True` makes each process
    (one chip) a unit of the outer network, so `mesh_shape` must be all ones and `dcn_mesh_shape` lays out the
    processes; `contiguous_submeshes` is met by any layout here (a process owns one chip)."""
    if topology is None:
        spec = os.environ.get("TORCH_TPU_TOPOLOGY") or "1"
    elif isinstance(topology, Topology):
        spec = topology.spec
    else:
        spec = str(topology)
    if process_is_granule:
        spec = "1"  # each process's devices (one chip) are a granule; the layout is over processes
    mesh = [int(x) for x in (mesh_shape if isinstance(mesh_shape, (tuple, list)) else (mesh_shape,))]
    dcn = [] if dcn_mesh_shape is None else [int(x) for x in dcn_mesh_shape]
    from torch_tpu import _C
    flat = _C._dist_mesh_layout(spec, mesh, dcn)
    if not allow_split_physical_axes and len(mesh) > 1:
        _check_unsplit(spec, mesh, _host_layout(flat, mesh, dcn))
    shape = [m * (dcn[i] if dcn else 1) for i, m in enumerate(mesh)]
    return torch.tensor(flat, dtype=torch.int64).reshape(shape)


def _host_layout(flat, mesh, dcn):
    """Host 0's chips in the layout, shaped as mesh (the ICI part every host repeats)."""
    full = torch.tensor(flat).reshape([m * (dcn[i] if dcn else 1) for i, m in enumerate(mesh)])
    return full[tuple(slice(0, m) for m in mesh)]


def _check_unsplit(spec, mesh, chips):
    """ValueError when a physical axis varies along two mesh dimensions (the layout split it)."""
    topo = Topology(spec)
    coords = {c: topo.coords(c) for c in range(topo.num_chips)}
    origin = coords[int(chips[tuple([0] * len(mesh))])]
    owner = {}
    for i, m in enumerate(mesh):
        varies = set()  # the physical axes along which mesh dimension i moves
        for k in range(1, m):
            idx = [0] * len(mesh)
            idx[i] = k
            c = coords[int(chips[tuple(idx)])]
            varies |= {axis for axis in range(len(c)) if c[axis] != origin[axis]}
        for axis in sorted(varies):
            if owner.setdefault(axis, i) != i:
                raise ValueError(
                    f"topology_aware_mesh: mesh shape {tuple(mesh)} splits physical axis {axis} of topology "
                    f"'{spec}' between mesh dimensions {owner[axis]} and {i}; pass allow_split_physical_axes=True "
                    "to allow it")


def _host_key() -> str:
    """Which host this process is on: TORCH_TPU_HOST_ID (tests run several "hosts" on one machine) or the
    hostname."""
    import socket
    return os.environ.get("TORCH_TPU_HOST_ID") or socket.gethostname()


def _create_backend(store, rank, size, timeout):
    """c10d's creator for "tpu_dist". Within one host: the shared-memory communicator. Across hosts
    (hierarchical): a communicator per host, gloo between the first ranks of the hosts (collectives), and a gloo
    group of every rank for what goes between two ranks of different hosts."""
    import datetime
    import torch.distributed as dist
    from torch_tpu import _C
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
    from torch.distributed.constants import default_pg_timeout
    if hasattr(timeout, "total_seconds") and timeout == default_pg_timeout:
        # c10d's 30-minute default was not chosen by the user: a missing rank fails in 5 minutes instead
        # (TORCH_TPU_DIST_TIMEOUT seconds); init_process_group(timeout=...) still sets it.
        seconds = float(os.environ.get("TORCH_TPU_DIST_TIMEOUT") or 300)
    host = _host_key()
    store.set(f"tpu_dist/host/{rank}", host)
    hosts = [store.get(f"tpu_dist/host/{r}").decode() for r in range(size)]
    names = list(dict.fromkeys(hosts))
    if len(names) == 1:
        return _C._dist_create_backend(store, rank, size, seconds, rank, size, 0, 1, None, None, None, None)
    local = size // len(names)
    if any(hosts[r] != names[r // local] for r in range(size)) or local * len(names) != size:
        raise NotImplementedError(
            "tpu_dist across hosts needs the same number of ranks on every host, numbered host by host (as torchrun "
            f"assigns them); got hosts {hosts}")
    h = rank // local
    local_store = dist.PrefixStore(f"tpu_dist/host{h}/", store)
    # What the queue's threads ask of the store (gloo's connections made on first use, the counts of messages
    # between hosts for receives from any source) goes through a connection of its own (clone): a store connection
    # serves one request at a time, and the application's thread may hold its own in a long wait (new_group
    # waiting for a rank that waits for a message this process has queued).
    try:
        queue_store = store.clone()
    except (RuntimeError, NotImplementedError):
        queue_store = store  # a store without clone (HashStore, FileStore) has no connection to hold

    def gloo(prefix, r, n):
        # Connections are made on first use (gloo's lazy init): a pair of ranks that never exchange a message costs
        # nothing, and the groups below cost no rendezvous when made.
        opts = dist.ProcessGroupGloo._Options()
        opts._devices = [dist.ProcessGroupGloo.create_default_device(lazy_init=True)]
        opts._timeout = datetime.timedelta(seconds=seconds)
        return dist.ProcessGroupGloo(dist.PrefixStore(prefix, queue_store), r, n, opts)

    # This rank's column: the ranks with its local rank on every host (the steps between hosts of all_reduce,
    # all_gather and reduce_scatter, on each local rank's share at once, and every step's check of the calls).
    column = gloo(f"tpu_dist/col{rank % local}/", h, len(names))
    # The hosts' first ranks (the step between hosts of a collective gathered within each host first) are column 0:
    # the same group, so a first rank's check and data go through one set of connections.
    cross = column if rank % local == 0 else None
    # Every rank, for what goes between two ranks of different hosts (send/recv, all_to_all's parts).
    world = gloo("tpu_dist/world/", rank, size)
    return _C._dist_create_backend(local_store, rank, size, seconds, rank % local, local, h, len(names), cross, world,
                                   column, dist.PrefixStore("tpu_dist/p2p/", queue_store))


def register_backend() -> None:
    """Registers "tpu_dist" for the tpu device with torch.distributed (done when torch_tpu loads)."""
    import torch.distributed as dist
    if not dist.is_available() or "tpu_dist" in dist.Backend.backend_list:
        return
    # Also for "cpu": CPU tensors given to a tpu_dist group (FSDP2's CPU offload: the gradient norm, full_tensor() of
    # an offloaded parameter; object collectives) go through the chip's memory instead of failing for want of a CPU
    # backend. Both devices name this backend, so c10d makes one per group and registers it for both.
    dist.Backend.register_backend("tpu_dist", _create_backend, devices=["tpu", "cpu"])
