"""vLLM's device communicator on the tpu device: the collectives of tensor parallelism (all_reduce,
all_gather, reduce_scatter, gather, broadcast, send/recv, and the uneven all_gatherv/reduce_scatterv) on
tpu tensors through torch.distributed with the "tpu_dist" backend (the platform's dist_backend), so they
run as the runtime's collectives between the chips' memories (runtime/dist). vLLM's base class already
issues every even collective on its device group; what is ours is the device (each worker process sees
its own chip as tpu:0, where vLLM would name it tpu:<local rank>) and the uneven ones.
"""
import torch
import torch.distributed as dist

from vllm.distributed.device_communicators.base_device_communicator import DeviceCommunicatorBase


class TpuCommunicator(DeviceCommunicatorBase):
    def __init__(self, cpu_group, device=None, device_group=None, unique_name="", global_ranks=None,
                 global_world_size=None, use_all2all=False):
        super().__init__(cpu_group, torch.device("tpu", torch.tpu.current_device()), device_group, unique_name,
                         global_ranks, global_world_size, use_all2all)
        if self.use_all2all:
            raise NotImplementedError("tpu platform: expert-parallel all-to-all is not supported yet")

    def _sizes(self, sizes, n):
        """Each rank's rows (None: n each); refuses a list that does not fit this rank's n rows."""
        if sizes is None:
            return [n] * self.world_size
        sizes = [int(s) for s in sizes]
        if len(sizes) != self.world_size or sizes[self.rank_in_group] != n:
            raise ValueError(f"tpu communicator: sizes {sizes} do not give this rank ({self.rank_in_group} of "
                             f"{self.world_size}) its {n} rows")
        return sizes

    def all_gatherv(self, input_, dim: int = 0, sizes=None):
        """Rows of different counts from each rank, concatenated along dim 0 (a list: each gathered)."""
        if dim != 0:
            raise NotImplementedError(f"tpu communicator: all_gatherv along dim {dim} (dim 0 is supported)")
        if not isinstance(input_, torch.Tensor):
            return [self.all_gatherv(t, dim, sizes) for t in input_]
        sizes = self._sizes(sizes, input_.shape[0])
        # tpu_dist's collectives take equal parts, as NCCL's do: uneven ones travel padded to the largest
        rows = max(sizes)
        x = input_.contiguous()
        if x.shape[0] < rows:
            x = torch.cat([x, x.new_zeros((rows - x.shape[0],) + tuple(x.shape[1:]))])
        out = x.new_empty((rows * self.world_size,) + tuple(x.shape[1:]))
        dist.all_gather_into_tensor(out, x, group=self.device_group)
        if len(set(sizes)) == 1:
            return out
        return torch.cat([out[r * rows:r * rows + s] for r, s in enumerate(sizes)])

    def reduce_scatterv(self, input_, dim: int = -1, sizes=None):
        """The sum over ranks of input_, this rank keeping its sizes[rank] rows along dim."""
        if dim < 0:
            dim += input_.dim()
        x = input_.movedim(dim, 0).contiguous() if dim else input_.contiguous()
        if sizes is None:
            if x.shape[0] % self.world_size:
                raise ValueError(f"tpu communicator: reduce_scatterv of {x.shape[0]} rows over {self.world_size} "
                                 f"ranks needs sizes")
            sizes = [x.shape[0] // self.world_size] * self.world_size
        sizes = [int(s) for s in sizes]
        if len(sizes) != self.world_size or sum(sizes) != x.shape[0]:
            raise ValueError(f"tpu communicator: sizes {sizes} do not split {x.shape[0]} rows over "
                             f"{self.world_size} ranks")
        rows = max(sizes)
        if len(set(sizes)) > 1:
            padded = x.new_zeros((rows * self.world_size,) + tuple(x.shape[1:]))
            for r, part in enumerate(x.split(sizes, dim=0)):
                padded[r * rows:r * rows + sizes[r]] = part
            x = padded
        out = x.new_empty((rows,) + tuple(x.shape[1:]))
        dist.reduce_scatter_tensor(out, x, group=self.device_group)
        out = out[:sizes[self.rank_in_group]]
        return out.movedim(0, dim).contiguous() if dim else out
