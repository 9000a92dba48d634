/* tpurt dist: a host's vTPU chips as a torus topology, and the collectives
 * between the chips of a host (one process per chip), in C over shared memory.
 *
 * Topology. TORCH_TPU_TOPOLOGY ("2x2", "2x2x1", "4"; default one chip) is the
 * host's chips as a 1-3 axis torus; chip ids run x fastest. Each process owns
 * one chip, chosen by TPU_VISIBLE_CHIPS (one chip id) or LOCAL_RANK, and sees
 * it as tpu:0. The host's compute threads and HBM budget are split evenly
 * between its chips unless TORCH_TPU_NUM_THREADS / TORCH_TPU_HBM_BYTES say
 * otherwise (exec/device.c applies the split).
 *
 * Collectives ("ICI"). A communicator is a shared-memory control block (one
 * cache line group per rank) plus every member's device memory mapped into
 * every member: a chip's HBM is a memfd, which peers open through
 * /proc/<pid>/fd. Large messages move between the chips' device memory
 * directly, by the rank that owns each piece (reduce-scatter + all-gather
 * in one pass: each rank reduces 1/N of the message over all inputs and
 * writes it into every output), block by block, between two barriers.
 * Small ones (up to 64 KiB per rank) go through two slots per rank in the
 * shared block, with one synchronisation per call; one issued on an idle
 * queue runs on the calling thread when the peers are already there.
 *
 * Every collective first publishes a header (sequence number, kind, dtype,
 * element count, root, reduction); peers compare headers before touching
 * data, so ranks that call different collectives get an error naming what
 * each called. A wait for a peer gives up after the communicator's timeout
 * with an error naming the rank and the collective, or at once when the peer
 * process has died, and marks the communicator aborted: every pending and
 * later collective of every rank then fails with that error (never a hang).
 * The shared-memory name is unlinked as soon as every rank has attached, so
 * even a crashed job leaves nothing in /dev/shm; a job that crashed during
 * attach leaves a name with its creator's pid, which the next create sweeps.
 */
#ifndef TPURT_DIST_H_
#define TPURT_DIST_H_

#include "tpurt/base.h"
#include "tpurt/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- topology ---- */
#define TPURT_DIST_MAX_AXES 3
#define TPURT_DIST_MAX_RANKS 64

typedef struct tpurt_dist_topology_t {
  int ndims;                      /* 1..3 axes as written ("2x2x1": 3) */
  int dims[TPURT_DIST_MAX_AXES];  /* chips along each axis (x first); unused axes are 1 */
  int num_chips;                  /* product of dims */
} tpurt_dist_topology_t;

/* "2x2", "4", "2x2x1" -> topology. INVALID_ARGUMENT naming the text. */
TPURT_API tpurt_status_t tpurt_dist_topology_parse(const char* spec, tpurt_dist_topology_t* out_topology);
/* Chip id -> coordinates (x first). */
TPURT_API tpurt_status_t tpurt_dist_topology_coords(const tpurt_dist_topology_t* topology, int chip,
                                                    int out_coords[TPURT_DIST_MAX_AXES]);
/* The distinct chips one link away from `chip`, including wrap-around links
 * (an axis of n > 2 chips is a ring; an axis of 2 has one link), ascending. */
TPURT_API tpurt_status_t tpurt_dist_topology_neighbors(const tpurt_dist_topology_t* topology, int chip,
                                                       int out_neighbors[2 * TPURT_DIST_MAX_AXES],
                                                       int* out_count);
/* The rank layout for a device mesh: mesh dimension i has mesh_shape[i] *
 * dcn_shape[i] (dcn_shape NULL: all 1) entries; out_ranks receives them in
 * row-major order. Within a host a mesh dimension the size of a physical
 * axis takes that axis (a ring, wrap-around included; last dimensions
 * first); the others take the remaining axes in order (x first, the last
 * mesh dimension the fastest), several axes in snake (reflected Gray code)
 * order so consecutive entries are linked chips, or part of one axis. The product of mesh_shape must be the host's
 * chip count; hosts (rank = host * chips + chip) are laid out row-major over
 * dcn_shape, as the outer factor of each dimension. INVALID_ARGUMENT says why
 * a shape cannot be laid out. */
TPURT_API tpurt_status_t tpurt_dist_mesh_layout(const tpurt_dist_topology_t* topology, int mesh_ndims,
                                                const int64_t* mesh_shape, const int64_t* dcn_shape,
                                                int64_t* out_ranks, int64_t out_capacity);

/* What this process is on its host, from the environment (TORCH_TPU_TOPOLOGY,
 * TPU_VISIBLE_CHIPS, LOCAL_RANK): the topology, its chip, and how many chips
 * share the host's cores and memory (1 without a topology). */
typedef struct tpurt_dist_host_config_t {
  tpurt_dist_topology_t topology;
  int chip;           /* this process's chip id in the topology */
  int chips_on_host;  /* the split of threads and HBM */
} tpurt_dist_host_config_t;
TPURT_API tpurt_status_t tpurt_dist_host_config(tpurt_dist_host_config_t* out_config);

/* ---- communicators ---- */
typedef struct tpurt_dist_comm_t tpurt_dist_comm_t;

typedef enum tpurt_dist_redop_e {
  TPURT_DIST_SUM = 0,
  TPURT_DIST_AVG,  /* sum / size: floating and complex dtypes only */
  TPURT_DIST_PRODUCT,
  TPURT_DIST_MIN,  /* real dtypes */
  TPURT_DIST_MAX,
  TPURT_DIST_BAND, /* integers and bool */
  TPURT_DIST_BOR,
  TPURT_DIST_BXOR,
  TPURT_DIST_REDOP_COUNT,
} tpurt_dist_redop_t;

typedef struct tpurt_dist_comm_params_t {
  const char* name;     /* shared-memory name, unique per communicator ("/tpurt_dist_<pid>_...") */
  int rank, size;       /* 0 <= rank < size <= TPURT_DIST_MAX_RANKS */
  uint64_t timeout_ms;  /* a wait for a peer gives up after this (0: 300000) */
  /* This rank's device memory: peers map it from /proc/<pid>/fd/<mem_fd>;
   * every buffer a collective is given must lie inside it. */
  int mem_fd;
  void* mem_base;
  uint64_t mem_bytes;
  /* The rank in the whole process group of this host's rank 0, when the
   * communicator is one host's part of a group spanning hosts (ranks are
   * numbered host by host): errors name ranks of the whole group. 0 else. */
  int first_rank;
} tpurt_dist_comm_params_t;

/* Rank 0 creates the shared block (sweeping dead jobs' leftovers first), the
 * others open it (retrying until the timeout); all map each other's memory,
 * then rank 0 unlinks the name. */
TPURT_API tpurt_status_t tpurt_dist_comm_create(const tpurt_dist_comm_params_t* params,
                                                tpurt_dist_comm_t** out_comm);
/* Unmaps everything; other ranks' later collectives fail naming this rank
 * (if it leaves before them). */
TPURT_API void tpurt_dist_comm_destroy(tpurt_dist_comm_t* comm);
TPURT_API int tpurt_dist_comm_rank(const tpurt_dist_comm_t* comm);
TPURT_API int tpurt_dist_comm_size(const tpurt_dist_comm_t* comm);
TPURT_API void tpurt_dist_comm_set_timeout(tpurt_dist_comm_t* comm, uint64_t timeout_ms);
/* The error that aborted the communicator (an owned copy), or OK. */
TPURT_API tpurt_status_t tpurt_dist_comm_error(tpurt_dist_comm_t* comm);
/* Aborts it for every rank with `why` (peers' collectives fail at once). */
TPURT_API void tpurt_dist_comm_abort(tpurt_dist_comm_t* comm, const char* why);
/* Called with the message by the process whose call aborted the
 * communicator (the first abort only: a peer that died or timed out, a
 * mismatch, tpurt_dist_comm_abort), on the thread that aborted it, with no
 * lock held: a group spanning hosts tells the other hosts from there. Set it
 * once, before the first collective. */
typedef void (*tpurt_dist_abort_hook_t)(void* user, const char* why);
TPURT_API void tpurt_dist_comm_set_abort_hook(tpurt_dist_comm_t* comm, tpurt_dist_abort_hook_t hook, void* user);

typedef enum tpurt_dist_kind_e {
  TPURT_DIST_ALLREDUCE = 1,
  TPURT_DIST_BROADCAST,
  TPURT_DIST_REDUCE,
  TPURT_DIST_ALLGATHER,
  TPURT_DIST_REDUCE_SCATTER,
  TPURT_DIST_ALLTOALL,
  TPURT_DIST_GATHER,
  TPURT_DIST_SCATTER,
  TPURT_DIST_BARRIER,
  TPURT_DIST_SEND,
  TPURT_DIST_RECV,
  TPURT_DIST_KIND_COUNT,
} tpurt_dist_kind_t;

/* One collective. Buffers are dense, in this rank's device memory; counts
 * are elements:
 *  ALLREDUCE       in -> out, count                  (in == out: in place)
 *  BROADCAST       out (root: in -> out), count
 *  REDUCE          in -> out (root only), count
 *  ALLGATHER       in: count -> out: size * count, rank-major
 *  REDUCE_SCATTER  in: size * count -> out: count
 *  ALLTOALL        in: send_counts[p] at send_offsets[p] -> out: recv_counts[p] at recv_offsets[p]
 *  GATHER          in: count -> out (root only): size * count
 *  SCATTER         in (root only): size * count -> out: count
 *  SEND / RECV     in (SEND) or out (RECV): count, with `peer` and `tag`;
 *                  a RECV's peer may be TPURT_DIST_ANY_SOURCE: it takes the
 *                  first message with its tag that any rank posts to it, and
 *                  writes the sender's rank to *out_source (when not NULL)
 * Pointers may be NULL where a rank has no such buffer; `count` must match
 * on every rank (for ALLTOALL: what p sends to r must be what r receives
 * from p). */
typedef struct tpurt_dist_op_t {
  tpurt_dist_kind_t kind;
  tpurt_dtype_t dtype;
  tpurt_dist_redop_t redop;
  int root;   /* BROADCAST, REDUCE, GATHER, SCATTER */
  int peer;   /* SEND, RECV */
  int tag;
  uint64_t count;
  const void* in;
  void* out;
  const uint64_t* send_counts;  /* ALLTOALL: size entries each */
  const uint64_t* send_offsets;
  const uint64_t* recv_counts;
  const uint64_t* recv_offsets;
  int* out_source; /* RECV from TPURT_DIST_ANY_SOURCE: the sender's rank, written when the op has run
                    * (a queued op writes it later: it must stay valid until then) */
  /* The collective across hosts this op is a step within the host of (an
   * allreduce's reduce_scatter), for its errors and its header's compare;
   * 0: the op is the collective itself. */
  tpurt_dist_kind_t part_of;
} tpurt_dist_op_t;

#define TPURT_DIST_ANY_SOURCE (-1)

/* A RECV from TPURT_DIST_ANY_SOURCE that does not wait: when a message with
 * its tag has been posted to this rank, takes it (as tpurt_dist_run would)
 * and sets *out_received; otherwise returns OK with *out_received false.
 * (A receive that must also watch another transport polls this.) */
TPURT_API tpurt_status_t tpurt_dist_recv_poll(tpurt_dist_comm_t* comm, const tpurt_dist_op_t* op,
                                              bool* out_received);

/* Runs it now on the calling thread. The error says which rank and which
 * collective (with its sequence number) when a peer is missing, dead or
 * called something else. */
TPURT_API tpurt_status_t tpurt_dist_run(tpurt_dist_comm_t* comm, const tpurt_dist_op_t* op);
/* Queues it on `queue` (a HAL host call, in order with the kernels around
 * it); the op and its count arrays are copied. Its error surfaces at the
 * queue's next synchronize, like a kernel's. A small collective issued
 * while the queue and the group have nothing pending starts at once on the
 * calling thread (its inputs are final), and ends there too when every peer
 * arrives within a few tens of microseconds; its error is then returned
 * here. */
struct tpurt_queue_t;
TPURT_API tpurt_status_t tpurt_dist_enqueue(tpurt_dist_comm_t* comm, struct tpurt_queue_t* queue,
                                            const tpurt_dist_op_t* op);

/* A group (batch_isend_irecv, coalesced calls): every SEND is posted first,
 * then the other ops run in order, then the sends' completions are awaited,
 * so pairs of sends and receives in any order between ranks cannot deadlock.
 * A queued group keeps its own copy of its ops and ALLTOALL count arrays. */
TPURT_API tpurt_status_t tpurt_dist_run_group(tpurt_dist_comm_t* comm, const tpurt_dist_op_t* ops, int n);
TPURT_API tpurt_status_t tpurt_dist_enqueue_group(tpurt_dist_comm_t* comm, struct tpurt_queue_t* queue,
                                                  const tpurt_dist_op_t* ops, int n);

/* Queues a SEND on `queue` outside the group's issue order: it takes no
 * turn among the collectives, so it neither waits for those issued before it
 * nor holds back those issued after while its receiver has not taken it (a
 * point-to-point op on a stream of its own, as NCCL's). The caller keeps the
 * sends to one peer in order (one queue per peer) and orders them against
 * groups that send to the same peer (events). */
TPURT_API tpurt_status_t tpurt_dist_enqueue_send(tpurt_dist_comm_t* comm, struct tpurt_queue_t* queue,
                                                 const tpurt_dist_op_t* op);

/* Queues fn(user) on `queue` in the group's issue order, like a collective
 * (the step between hosts of a hierarchical collective). fn runs exactly
 * once and owns `user`; its status is the command's. A step that fails
 * aborts the communicator with its error (when nothing aborted it before),
 * so the host's other ranks stop too rather than run their next step
 * without it. */
TPURT_API tpurt_status_t tpurt_dist_enqueue_host(tpurt_dist_comm_t* comm, struct tpurt_queue_t* queue,
                                                 tpurt_status_t (*fn)(void* user), void* user);

TPURT_API const char* tpurt_dist_kind_name(tpurt_dist_kind_t kind);
TPURT_API const char* tpurt_dist_redop_name(tpurt_dist_redop_t redop);

#ifdef __cplusplus
}
#endif
#endif /* TPURT_DIST_H_ */
