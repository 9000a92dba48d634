/* Collectives between the chips of a host (tpurt/dist.h): the shared control
 * block, every member's device memory mapped into every member, waits that
 * name who is missing, and the data movement of each collective. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/futex.h"
#include "base/stream_copy.h"
#include "dist/reduce.h"
#include "tpurt/device.h"
#include "tpurt/dist.h"

#define MAGIC 0x7470757264697374ull /* "tpurdist" */
#define MAXR TPURT_DIST_MAX_RANKS
#define PREFIX "tpurt_dist_"
/* Elements per reduction block: small enough to stay in L2 with every input. */
#define BLOCK_BYTES (32u << 10)
/* Messages up to this many bytes per rank go through the control block
 * itself (each rank's two slots, alternating calls): one synchronisation per
 * call instead of two (see "Two protocols" below). */
#define SLOT_BYTES (64u << 10)
/* How long a thread that issued a small collective on an idle queue waits
 * for its peers itself before leaving the rest to the queue's thread. */
#define INLINE_WAIT_NS 30000u
/* A large collective that only copies (all_gather, gather, scatter,
 * broadcast, all_to_all) and whose output has at least this many bytes per
 * rank writes it with streaming stores: a plain store first reads each line
 * of the output, and evicts cached lines for ones nobody reads soon. On 4
 * chips an all_gather of 16-64 MiB took 1.5-2x less time (README). Not for
 * the reductions: their output is usually their input, already cached. */
#define STREAM_MIN_BYTES (8u << 20)
/* Messages one rank may have posted to another and not yet seen taken: a
 * group (batch_isend_irecv) posts all its sends before it waits, so this is
 * the most sends to one peer a group may hold. */
#define P2P_DEPTH 8

/* What every rank publishes about the collective it is in. */
typedef struct header_t {
  uint64_t seq;
  int32_t kind, dtype, redop, root, part_of;
  uint64_t count;
  uint64_t in_off, out_off; /* offsets into the rank's device memory (UINT64_MAX: none) */
} header_t;

typedef struct p2p_msg_t {
  uint64_t off, count;
  int32_t dtype, tag;
} p2p_msg_t;

typedef struct __attribute__((aligned(64))) shm_rank_t {
  _Atomic uint32_t arrive; /* barriers passed: 2 per collective */
  _Atomic int32_t pid;
  _Atomic uint32_t left;   /* destroyed its communicator */
  _Atomic uint32_t between_hosts; /* running a step between hosts (tpurt_dist_enqueue_host) */
  int32_t mem_fd;
  uint64_t mem_bytes;
  header_t hdr[2];         /* call k's header in hdr[k & 1] */
  uint64_t send_counts[MAXR], send_offsets[MAXR], recv_counts[MAXR], recv_offsets[MAXR];
  _Atomic uint32_t p2p_posted[MAXR]; /* messages posted to rank d */
  _Atomic uint32_t p2p_taken[MAXR];  /* messages taken from rank s */
  p2p_msg_t p2p_msg[MAXR][P2P_DEPTH]; /* message #n to rank d in [d][(n - 1) % P2P_DEPTH] */
} shm_rank_t;

typedef struct shm_t {
  uint64_t magic;
  uint32_t size;
  _Atomic uint32_t attached;
  _Atomic uint32_t wake;     /* bumped on every state change; waiters sleep on it */
  _Atomic uint32_t sleepers;
  _Atomic uint32_t aborted;  /* 0; 1 while the message is written; 2 once it is readable */
  char abort_msg[1024];
  shm_rank_t ranks[];
} shm_t;

struct tpurt_dist_comm_t {
  int rank, size;
  int first; /* the group rank of local rank 0 (errors name group ranks) */
  tpurt_dist_abort_hook_t hook;
  void* hook_user;
  uint64_t timeout_ns;
  shm_t* shm;
  size_t shm_bytes;
  uint8_t* base[MAXR]; /* each rank's device memory, mapped here (ours: the caller's) */
  uint8_t* slots;      /* the ranks' data slots in the control block */
  uint64_t bytes[MAXR];
  uint64_t seq;
  uint32_t p2p_sent[MAXR], p2p_recvd[MAXR];
  int any_next; /* where a receive from any source starts looking */
  void* scratch; /* reduction blocks */
  char name[256];
  /* Queued collectives run in the order they were issued, whichever queue
   * (stream) carries them: every rank issues the same sequence, so every
   * rank runs it in the same order (FSDP2 issues all-gathers and
   * reduce-scatters on two streams). */
  _Atomic uint32_t next_ticket; /* issued */
  _Atomic uint32_t done_ticket; /* run; a private futex word */
};

static const char* kind_names[TPURT_DIST_KIND_COUNT] = {
    [TPURT_DIST_ALLREDUCE] = "allreduce", [TPURT_DIST_BROADCAST] = "broadcast",
    [TPURT_DIST_REDUCE] = "reduce", [TPURT_DIST_ALLGATHER] = "all_gather",
    [TPURT_DIST_REDUCE_SCATTER] = "reduce_scatter", [TPURT_DIST_ALLTOALL] = "all_to_all",
    [TPURT_DIST_GATHER] = "gather", [TPURT_DIST_SCATTER] = "scatter", [TPURT_DIST_BARRIER] = "barrier",
    [TPURT_DIST_SEND] = "send", [TPURT_DIST_RECV] = "recv"};
static const char* redop_names[TPURT_DIST_REDOP_COUNT] = {"sum", "avg", "product", "min", "max",
                                                           "band", "bor", "bxor"};

/* What a queued collective is called on the device trace (the profiler's device track). */
static const char* trace_names[TPURT_DIST_KIND_COUNT] = {
    [TPURT_DIST_ALLREDUCE] = "tpu_dist allreduce", [TPURT_DIST_BROADCAST] = "tpu_dist broadcast",
    [TPURT_DIST_REDUCE] = "tpu_dist reduce", [TPURT_DIST_ALLGATHER] = "tpu_dist all_gather",
    [TPURT_DIST_REDUCE_SCATTER] = "tpu_dist reduce_scatter", [TPURT_DIST_ALLTOALL] = "tpu_dist all_to_all",
    [TPURT_DIST_GATHER] = "tpu_dist gather", [TPURT_DIST_SCATTER] = "tpu_dist scatter",
    [TPURT_DIST_BARRIER] = "tpu_dist barrier", [TPURT_DIST_SEND] = "tpu_dist send", [TPURT_DIST_RECV] = "tpu_dist recv"};

const char* tpurt_dist_kind_name(tpurt_dist_kind_t k) {
  return k > 0 && k < TPURT_DIST_KIND_COUNT ? kind_names[k] : "unknown collective";
}
const char* tpurt_dist_redop_name(tpurt_dist_redop_t r) {
  return r >= 0 && r < TPURT_DIST_REDOP_COUNT ? redop_names[r] : "unknown reduction";
}

/* ---- cross-process futex on the shared block ---- */

static void futex_wait_shared(_Atomic uint32_t* w, uint32_t expected, uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  syscall(SYS_futex, (uint32_t*)w, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static void notify(shm_t* s) {
  atomic_fetch_add(&s->wake, 1);
  if (atomic_load(&s->sleepers)) syscall(SYS_futex, (uint32_t*)&s->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* ---- errors ---- */

static void describe(const header_t* h, char* buf, size_t n) {
  const char* dt = tpurt_dtype_name((tpurt_dtype_t)h->dtype);
  int k;
  switch (h->kind) {
    case TPURT_DIST_BARRIER: k = snprintf(buf, n, "barrier"); break;
    case TPURT_DIST_ALLREDUCE: case TPURT_DIST_REDUCE_SCATTER:
      k = snprintf(buf, n, "%s(%s, %llu elements, %s)", tpurt_dist_kind_name(h->kind), dt,
                   (unsigned long long)h->count, tpurt_dist_redop_name(h->redop));
      break;
    case TPURT_DIST_REDUCE:
      k = snprintf(buf, n, "reduce(%s, %llu elements, %s, root %d)", dt, (unsigned long long)h->count,
                   tpurt_dist_redop_name(h->redop), h->root);
      break;
    case TPURT_DIST_BROADCAST: case TPURT_DIST_GATHER: case TPURT_DIST_SCATTER:
      k = snprintf(buf, n, "%s(%s, %llu elements, root %d)", tpurt_dist_kind_name(h->kind), dt,
                   (unsigned long long)h->count, h->root);
      break;
    default:
      k = snprintf(buf, n, "%s(%s, %llu elements)", tpurt_dist_kind_name(h->kind), dt, (unsigned long long)h->count);
  }
  if (h->part_of > 0 && k >= 0 && (size_t)k < n)
    snprintf(buf + k, n - (size_t)k, " within the host, a step of %s across hosts", tpurt_dist_kind_name(h->part_of));
}

void tpurt_dist_comm_abort(tpurt_dist_comm_t* c, const char* why) {
  uint32_t zero = 0;
  bool first = atomic_compare_exchange_strong(&c->shm->aborted, &zero, 1);
  if (first) {
    snprintf(c->shm->abort_msg, sizeof(c->shm->abort_msg), "%s", why);
    atomic_store(&c->shm->aborted, 2);
  }
  notify(c->shm);
  if (first && c->hook) c->hook(c->hook_user, c->shm->abort_msg);
}

void tpurt_dist_comm_set_abort_hook(tpurt_dist_comm_t* c, tpurt_dist_abort_hook_t hook, void* user) {
  if (!c) return;
  c->hook = hook;
  c->hook_user = user;
}

static tpurt_status_t aborted_status(tpurt_dist_comm_t* c) {
  while (atomic_load(&c->shm->aborted) == 1) tpurt_cpu_relax();
  return TPURT_STATUS(ABORTED, "tpu_dist: the process group was aborted: %s", c->shm->abort_msg);
}

tpurt_status_t tpurt_dist_comm_error(tpurt_dist_comm_t* c) {
  return c && atomic_load(&c->shm->aborted) ? aborted_status(c) : TPURT_OK;
}

/* Dead: gone, or a zombie its parent has not reaped yet. */
static bool pid_dead(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  char* rp = strrchr(buf, ')');
  return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* What a wait was for, for its error message: a collective's header
 * (described only when the wait fails) or a text. */
typedef struct waiting_t {
  const header_t* call;
  const char* text;
} waiting_t;

/* Fails the wait (and aborts the communicator for everyone) naming the rank
 * waited for and what this rank was doing. */
static tpurt_status_t fail_wait(tpurt_dist_comm_t* c, int peer, waiting_t what, const char* cause) {
  char desc[160], call[200], msg[768];
  if (what.call) {
    describe(what.call, desc, sizeof(desc));
    snprintf(call, sizeof(call), "%s (call #%llu of the group)", desc, (unsigned long long)what.call->seq);
  }
  snprintf(msg, sizeof(msg), "rank %d (pid %d) %s %s; seen by rank %d", c->first + peer,
           (int)atomic_load(&c->shm->ranks[peer].pid), cause, what.call ? call : what.text, c->first + c->rank);
  tpurt_dist_comm_abort(c, msg);
  return aborted_status(c);
}

/* Waits until ready(c, arg) names no missing rank (returns -1). Spins a
 * little (a peer on another core is usually microseconds away), yielding
 * the core (the peer may need it), then sleeps on the shared wake word,
 * checking every 50 ms for an abort, a dead peer and the timeout. A waiter
 * is woken only when what it waits for may be complete (a barrier's last
 * arrival, a message, an abort), not at every peer's step. */
typedef int (*missing_fn)(tpurt_dist_comm_t* c, uint64_t arg);

static tpurt_status_t wait_for(tpurt_dist_comm_t* c, missing_fn missing, uint64_t arg, waiting_t what) {
  shm_t* s = c->shm;
  uint64_t t0 = tpurt_now_ns();
  for (int i = 0;; ++i) {
    if (missing(c, arg) < 0) return TPURT_OK;
    if (atomic_load(&s->aborted)) return aborted_status(c);
    if ((i & 63) == 63 && tpurt_now_ns() - t0 > 50000) break;
    if (i < 256) tpurt_cpu_relax();
    else sched_yield();
  }
  uint64_t last_check = 0;
  for (;;) {
    uint32_t w = atomic_load(&s->wake);
    atomic_fetch_add(&s->sleepers, 1);
    int m = missing(c, arg);
    if (m >= 0 && !atomic_load(&s->aborted)) futex_wait_shared(&s->wake, w, 20000000ull);
    atomic_fetch_sub(&s->sleepers, 1);
    m = missing(c, arg);
    if (m < 0) return TPURT_OK;
    if (atomic_load(&s->aborted)) return aborted_status(c);
    uint64_t now = tpurt_now_ns();
    if (now - last_check >= 50000000ull) {
      last_check = now;
      if (atomic_load(&s->ranks[m].left)) return fail_wait(c, m, what, "destroyed its process group before");
      if (pid_dead(atomic_load(&s->ranks[m].pid))) return fail_wait(c, m, what, "died (exited or was killed) before finishing");
      /* A peer inside a step between hosts waits for another host, under a timeout of its own (gloo's, the
       * group's timeout): the rank that holds the collective up is there, and that step's error names it. So
       * it is not blamed here before twice the timeout (and 10 s) have passed. */
      bool away = atomic_load(&s->ranks[m].between_hosts) && now - t0 <= 2 * c->timeout_ns + 10000000000ull;
      if (now - t0 > c->timeout_ns && !away) {
        char cause[96];
        snprintf(cause, sizeof(cause), "did not join within the %.1f s timeout:", (double)c->timeout_ns / 1e9);
        return fail_wait(c, m, what, cause);
      }
    }
  }
}

static int missing_arrive(tpurt_dist_comm_t* c, uint64_t target) {
  for (int p = 0; p < c->size; ++p)
    if (atomic_load(&c->shm->ranks[p].arrive) < (uint32_t)target) return p;
  return -1;
}

static int missing_attach(tpurt_dist_comm_t* c, uint64_t unused) {
  if (atomic_load(&c->shm->attached) >= (uint32_t)c->size) return -1;
  for (int p = 0; p < c->size; ++p)
    if (atomic_load(&c->shm->ranks[p].pid) == 0) return p;
  return 0;
}

/* Arrives at barrier value `target`; the rank that completes it wakes the
 * sleepers. (Both the store and the loads are sequentially consistent: of
 * two ranks arriving together, at least one sees the other.) */
static void arrive(tpurt_dist_comm_t* c, uint32_t target) {
  atomic_store(&c->shm->ranks[c->rank].arrive, target);
  if (missing_arrive(c, target) < 0) notify(c->shm);
}

static tpurt_status_t barrier(tpurt_dist_comm_t* c, uint32_t target, waiting_t what) {
  arrive(c, target);
  return wait_for(c, missing_arrive, target, what);
}

/* ---- create / destroy ---- */

static void sweep_stale(void) {
  DIR* d = opendir("/dev/shm");
  if (!d) return;
  struct dirent* e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, PREFIX, strlen(PREFIX)) != 0) continue;
    int pid = atoi(e->d_name + strlen(PREFIX));
    if (pid > 0 && pid_dead(pid)) {
      char name[300];
      snprintf(name, sizeof(name), "/%s", e->d_name);
      shm_unlink(name);
    }
  }
  closedir(d);
}

/* The control block, then each rank's two data slots (rank-major). */
static size_t slots_offset(int n) { return (sizeof(shm_t) + (size_t)n * sizeof(shm_rank_t) + 63) & ~(size_t)63; }
static size_t shm_size(int n) { return slots_offset(n) + (size_t)n * 2 * SLOT_BYTES; }

tpurt_status_t tpurt_dist_comm_create(const tpurt_dist_comm_params_t* p, tpurt_dist_comm_t** out) {
  if (!p || !out || !p->name || p->name[0] != '/' || strlen(p->name) > 200 || strchr(p->name + 1, '/'))
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: comm_create needs a shared-memory name '/name'");
  if (p->size < 1 || p->size > MAXR || p->rank < 0 || p->rank >= p->size)
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: rank %d of %d (at most %d ranks on a host)", p->rank,
                        p->size, MAXR);
  if (!p->mem_base || p->mem_fd < 0 || !p->mem_bytes)
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: the chip's device memory must be shareable (a memfd)");
  *out = NULL;
  tpurt_dist_comm_t* c = calloc(1, sizeof(*c));
  if (!c) return TPURT_STATUS(RESOURCE_EXHAUSTED, "tpu_dist: out of host memory");
  c->rank = p->rank;
  c->first = p->first_rank;
  c->size = p->size;
  c->timeout_ns = (p->timeout_ms ? p->timeout_ms : 300000) * 1000000ull;
  snprintf(c->name, sizeof(c->name), "%s", p->name);
  c->shm_bytes = shm_size(p->size);
  c->scratch = aligned_alloc(64, 3 * BLOCK_BYTES * 2);
  tpurt_status_t st = TPURT_OK;
  int fd = -1;
  uint64_t t0 = tpurt_now_ns();
  if (p->rank == 0) {
    sweep_stale();
    shm_unlink(p->name); /* a leftover of a job that reused this name */
    fd = shm_open(p->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->shm_bytes) != 0) {
      st = TPURT_STATUS(UNAVAILABLE, "tpu_dist: cannot create shared memory %s: %s", p->name, strerror(errno));
      goto fail;
    }
  } else {
    /* Rank 0 may not have created it yet. */
    for (;;) {
      fd = shm_open(p->name, O_RDWR | O_CLOEXEC, 0600);
      struct stat sb;
      if (fd >= 0 && fstat(fd, &sb) == 0 && (size_t)sb.st_size >= c->shm_bytes) {
        shm_t* probe = mmap(NULL, c->shm_bytes, PROT_READ, MAP_SHARED, fd, 0);
        bool ready = probe != MAP_FAILED && __atomic_load_n(&probe->magic, __ATOMIC_ACQUIRE) == MAGIC;
        if (probe != MAP_FAILED) munmap(probe, c->shm_bytes);
        if (ready) break;
      }
      if (fd >= 0) close(fd);
      fd = -1;
      if (tpurt_now_ns() - t0 > c->timeout_ns) {
        st = TPURT_STATUS(DEADLINE_EXCEEDED, "tpu_dist: rank 0 did not create the shared memory %s within %.1f s",
                          p->name, (double)c->timeout_ns / 1e9);
        goto fail;
      }
      usleep(1000);
    }
  }
  c->shm = mmap(NULL, c->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  fd = -1;
  if (c->shm == MAP_FAILED) {
    c->shm = NULL;
    st = TPURT_STATUS(UNAVAILABLE, "tpu_dist: cannot map shared memory %s: %s", p->name, strerror(errno));
    goto fail;
  }
  c->slots = (uint8_t*)c->shm + slots_offset(p->size);
  if (p->rank == 0) {
    c->shm->size = (uint32_t)p->size;
    __atomic_store_n(&c->shm->magic, MAGIC, __ATOMIC_RELEASE);
  } else if (c->shm->size != (uint32_t)p->size) {
    st = TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: rank %d says the group has %d ranks, rank 0 says %u", p->rank,
                      p->size, c->shm->size);
    goto fail;
  }
  shm_rank_t* me = &c->shm->ranks[p->rank];
  me->mem_fd = p->mem_fd;
  me->mem_bytes = p->mem_bytes;
  atomic_store(&me->pid, (int32_t)getpid());
  atomic_fetch_add(&c->shm->attached, 1);
  notify(c->shm);
  st = wait_for(c, missing_attach, 0, (waiting_t){NULL, "joining the process group"});
  if (st) goto fail;
  /* Everyone has opened the block: the name can go, so a crash from here on
   * leaves nothing in /dev/shm. */
  if (p->rank == 0) shm_unlink(p->name);
  for (int r = 0; r < p->size; ++r) {
    if (r == p->rank) {
      c->base[r] = p->mem_base;
      c->bytes[r] = p->mem_bytes;
      continue;
    }
    char path[64];
    shm_rank_t* pr = &c->shm->ranks[r];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)atomic_load(&pr->pid), pr->mem_fd);
    int mfd = open(path, O_RDWR | O_CLOEXEC);
    void* m = mfd < 0 ? MAP_FAILED : mmap(NULL, pr->mem_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, mfd, 0);
    int e = errno;
    if (mfd >= 0) close(mfd);
    if (m == MAP_FAILED) {
      st = TPURT_STATUS(UNAVAILABLE, "tpu_dist: rank %d cannot map rank %d's device memory (%s): %s", p->rank, r,
                        path, strerror(e));
      goto fail;
    }
    c->base[r] = m;
    c->bytes[r] = pr->mem_bytes;
  }
  /* Nobody returns before everyone has mapped everyone (a peer's first
   * collective may read our memory at once). */
  st = barrier(c, 1, (waiting_t){NULL, "joining the process group"});
  if (st) goto fail;
  *out = c;
  return TPURT_OK;
fail:
  if (fd >= 0) close(fd);
  if (c->shm) {
    tpurt_dist_comm_abort(c, "a rank failed to join the process group");
    if (p->rank == 0) shm_unlink(p->name);
  }
  tpurt_dist_comm_destroy(c);
  return st;
}

void tpurt_dist_comm_destroy(tpurt_dist_comm_t* c) {
  if (!c) return;
  if (c->shm) {
    atomic_store(&c->shm->ranks[c->rank].left, 1);
    notify(c->shm);
    for (int r = 0; r < c->size; ++r)
      if (r != c->rank && c->base[r]) munmap(c->base[r], c->bytes[r]);
    munmap(c->shm, c->shm_bytes);
  }
  free(c->scratch);
  free(c);
}

int tpurt_dist_comm_rank(const tpurt_dist_comm_t* c) { return c->rank; }
int tpurt_dist_comm_size(const tpurt_dist_comm_t* c) { return c->size; }
void tpurt_dist_comm_set_timeout(tpurt_dist_comm_t* c, uint64_t ms) { c->timeout_ns = (ms ? ms : 300000) * 1000000ull; }

/* ---- running a collective ---- */

static uint64_t offset_of(tpurt_dist_comm_t* c, const void* ptr, uint64_t bytes, const char* which,
                          tpurt_status_t* st) {
  if (!ptr) return UINT64_MAX;
  const uint8_t* b = c->base[c->rank];
  if ((const uint8_t*)ptr < b || (uint64_t)((const uint8_t*)ptr - b) > c->bytes[c->rank] ||
      bytes > c->bytes[c->rank] - (uint64_t)((const uint8_t*)ptr - b)) {
    if (!*st)
      *st = TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: the %s buffer [%p, +%llu bytes) is not in this chip's device "
                         "memory", which, ptr, (unsigned long long)bytes);
    return UINT64_MAX;
  }
  return (uint64_t)((const uint8_t*)ptr - b);
}

static inline uint8_t* at(tpurt_dist_comm_t* c, int r, uint64_t off) { return c->base[r] + off; }

/* Reduces elements [lo, hi) of every rank's input (srcs[p]: rank p's
 * element 0) block by block into a scratch block, and copies each block to
 * every one of the ndst outputs (element 0 at dsts[j]). Reducing into
 * scratch first lets an output be one of the inputs. */
static inline void put(void* dst, const void* src, size_t n, bool stream) {
  if (stream) tpurt_stream_copy(dst, src, n);
  else memcpy(dst, src, n);
}

static void reduce_range(tpurt_dist_comm_t* c, const header_t* h, const uint8_t* const* srcs, uint8_t* const* dsts,
                         int ndst, uint64_t lo, uint64_t hi) {
  tpurt_dtype_t dt = (tpurt_dtype_t)h->dtype;
  size_t es = tpurt_dtype_size(dt);
  uint64_t block = BLOCK_BYTES / es;
  for (uint64_t b = lo; b < hi; b += block) {
    uint64_t n = hi - b < block ? hi - b : block;
    const void* src[MAXR];
    for (int p = 0; p < c->size; ++p) src[p] = srcs[p] + b * es;
    void* tmp = c->scratch;
    tpurt_dist_reduce_block(dt, (tpurt_dist_redop_t)h->redop, src, c->size, n, tmp,
                            (uint8_t*)c->scratch + 2 * BLOCK_BYTES);
    for (int j = 0; j < ndst; ++j) memcpy(dsts[j] + b * es, tmp, n * es);
  }
}

static bool same_call(const header_t* a, const header_t* b) {
  if (a->kind != b->kind || a->dtype != b->dtype || a->part_of != b->part_of) return false;
  switch (a->kind) {
    case TPURT_DIST_BARRIER: return true;
    case TPURT_DIST_ALLTOALL: return true; /* counts: checked pairwise */
    case TPURT_DIST_ALLREDUCE: case TPURT_DIST_REDUCE_SCATTER:
      return a->count == b->count && a->redop == b->redop;
    case TPURT_DIST_REDUCE: return a->count == b->count && a->redop == b->redop && a->root == b->root;
    default: return a->count == b->count && a->root == b->root;
  }
}

static tpurt_status_t check_headers(tpurt_dist_comm_t* c, int slot) {
  const header_t* mine = &c->shm->ranks[c->rank].hdr[slot];
  for (int p = 0; p < c->size; ++p) {
    const header_t* h = &c->shm->ranks[p].hdr[slot];
    /* Everyone compares against rank 0, so every rank reports the same pair. */
    const header_t* h0 = &c->shm->ranks[0].hdr[slot];
    if (!same_call(h0, h)) {
      char a[160], b[160], msg[512];
      describe(h0, a, sizeof(a));
      describe(h, b, sizeof(b));
      snprintf(msg, sizeof(msg), "mismatched collectives at call #%llu of the group: rank %d called %s but rank %d "
               "called %s (no data was exchanged)", (unsigned long long)mine->seq, c->first, a, c->first + p, b);
      tpurt_dist_comm_abort(c, msg);
      return aborted_status(c);
    }
  }
  if (mine->kind == TPURT_DIST_ALLTOALL) {
    for (int p = 0; p < c->size; ++p)
      for (int q = 0; q < c->size; ++q) {
        uint64_t sent = c->shm->ranks[p].send_counts[q], want = c->shm->ranks[q].recv_counts[p];
        if (sent != want) {
          char msg[512];
          snprintf(msg, sizeof(msg), "mismatched all_to_all at call #%llu: rank %d sends %llu elements to rank %d, "
                   "which expects %llu (no data was exchanged)", (unsigned long long)mine->seq, c->first + p,
                   (unsigned long long)sent, c->first + q, (unsigned long long)want);
          tpurt_dist_comm_abort(c, msg);
          return aborted_status(c);
        }
      }
  }
  return TPURT_OK;
}

static tpurt_status_t validate(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op) {
  if (op->kind <= 0 || op->kind >= TPURT_DIST_KIND_COUNT)
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: unknown collective %d", (int)op->kind);
  if (op->dtype < 0 || op->dtype >= TPURT_DTYPE_COUNT)
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: %s: unknown dtype %d", tpurt_dist_kind_name(op->kind), (int)op->dtype);
  bool reduces = op->kind == TPURT_DIST_ALLREDUCE || op->kind == TPURT_DIST_REDUCE || op->kind == TPURT_DIST_REDUCE_SCATTER;
  if (reduces) TPURT_RETURN_IF_ERROR(tpurt_dist_redop_check(op->dtype, op->redop, tpurt_dist_kind_name(op->kind)));
  bool rooted = op->kind == TPURT_DIST_BROADCAST || op->kind == TPURT_DIST_REDUCE || op->kind == TPURT_DIST_GATHER ||
                op->kind == TPURT_DIST_SCATTER;
  if (rooted && (op->root < 0 || op->root >= c->size))
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: %s: root %d is not a rank of this group of %d",
                        tpurt_dist_kind_name(op->kind), op->root, c->size);
  bool any_source = op->kind == TPURT_DIST_RECV && op->peer == TPURT_DIST_ANY_SOURCE;
  if ((op->kind == TPURT_DIST_SEND || op->kind == TPURT_DIST_RECV) && !any_source &&
      (op->peer < 0 || op->peer >= c->size || op->peer == c->rank))
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: %s: peer %d is not another rank of this group of %d",
                        tpurt_dist_kind_name(op->kind), op->peer, c->size);
  if (op->kind == TPURT_DIST_ALLTOALL && (!op->send_counts || !op->send_offsets || !op->recv_counts || !op->recv_offsets))
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: all_to_all needs send/recv counts and offsets");
  if (op->count) {
    /* The buffers each rank must give (the root's, or everyone's). */
    bool root = op->root == c->rank, needs_in, needs_out;
    switch (op->kind) {
      case TPURT_DIST_BROADCAST: case TPURT_DIST_SCATTER: needs_in = root, needs_out = true; break;
      case TPURT_DIST_REDUCE: case TPURT_DIST_GATHER: needs_in = true, needs_out = root; break;
      case TPURT_DIST_ALLREDUCE: case TPURT_DIST_ALLGATHER: case TPURT_DIST_REDUCE_SCATTER:
        needs_in = needs_out = true;
        break;
      default: needs_in = needs_out = false; break;
    }
    if ((needs_in && !op->in) || (needs_out && !op->out))
      return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: %s: rank %d gave no %s buffer", tpurt_dist_kind_name(op->kind),
                          c->rank, needs_in && !op->in ? "input" : "output");
  }
  return TPURT_OK;
}

/* Point to point: the sender posts (offset, count) in its slot for the
 * receiver and waits until the receiver has copied it out. */
typedef struct p2p_wait_t {
  int peer;
  uint32_t count;
  bool taken; /* wait for the peer's taken count (sender) or posted count (receiver) */
} p2p_wait_t;

static int missing_p2p(tpurt_dist_comm_t* c, uint64_t arg) {
  const p2p_wait_t* w = (const p2p_wait_t*)(uintptr_t)arg;
  uint32_t v = w->taken ? atomic_load_explicit(&c->shm->ranks[w->peer].p2p_taken[c->rank], memory_order_acquire)
                        : atomic_load_explicit(&c->shm->ranks[w->peer].p2p_posted[c->rank], memory_order_acquire);
  return v >= w->count ? -1 : w->peer;
}

/* Posts a send: the receiver copies it straight out of our device memory. */
static tpurt_status_t post_send(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op, uint32_t* out_n) {
  size_t es = tpurt_dtype_size(op->dtype);
  tpurt_status_t st = TPURT_OK;
  uint64_t off = offset_of(c, op->in, op->count * es, "send", &st);
  if (st) return st;
  shm_rank_t* me = &c->shm->ranks[c->rank];
  uint32_t n = c->p2p_sent[op->peer] + 1;
  if (n > P2P_DEPTH) { /* the slot of message n - P2P_DEPTH must have been taken (a group's limit makes this immediate) */
    p2p_wait_t w = {op->peer, n - P2P_DEPTH, true};
    TPURT_RETURN_IF_ERROR(wait_for(c, missing_p2p, (uint64_t)(uintptr_t)&w, (waiting_t){NULL, "taking an earlier message"}));
  }
  c->p2p_sent[op->peer] = n;
  me->p2p_msg[op->peer][(n - 1) % P2P_DEPTH] = (p2p_msg_t){off, op->count, op->dtype, op->tag};
  atomic_store_explicit(&me->p2p_posted[op->peer], n, memory_order_release);
  notify(c->shm);
  *out_n = n;
  return TPURT_OK;
}

/* Waits until the receiver has taken send #n (our buffer is free again). */
static tpurt_status_t finish_send(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op, uint32_t n) {
  char what[160];
  snprintf(what, sizeof(what), "receiving message #%u (send of %llu %s elements, tag %d) from rank %d", n,
           (unsigned long long)op->count, tpurt_dtype_name(op->dtype), op->tag, c->first + c->rank);
  p2p_wait_t w = {op->peer, n, true};
  return wait_for(c, missing_p2p, (uint64_t)(uintptr_t)&w, (waiting_t){NULL, what});
}

/* A receive from any source waits for a message with its tag posted by any
 * rank (the peers are scanned from `next`, rotating, so no sender starves);
 * a message with another tag is left for the receive it belongs to. While
 * none has come, the first rank with nothing posted that is still in the
 * group is the one named if the wait fails: a rank that destroyed its group
 * fails the receive only when every rank that could still send has too (a
 * rank done with its sends may leave while another's message is on its way). */
typedef struct any_wait_t {
  int tag, next, found;
} any_wait_t;

static int missing_any(tpurt_dist_comm_t* c, uint64_t arg) {
  any_wait_t* w = (any_wait_t*)(uintptr_t)arg;
  int blame = -1, gone = -1;
  for (int k = 0; k < c->size; ++k) {
    int p = (w->next + k) % c->size;
    if (p == c->rank) continue;
    const shm_rank_t* pr = &c->shm->ranks[p];
    uint32_t posted = atomic_load_explicit(&pr->p2p_posted[c->rank], memory_order_acquire);
    if (posted > c->p2p_recvd[p] && pr->p2p_msg[c->rank][c->p2p_recvd[p] % P2P_DEPTH].tag == w->tag) {
      w->found = p;
      return -1;
    }
    if (posted > c->p2p_recvd[p]) continue;
    if (!atomic_load(&pr->left)) {
      if (blame < 0) blame = p;
    } else if (gone < 0) {
      gone = p;
    }
  }
  return blame >= 0 ? blame : gone >= 0 ? gone : (c->rank + 1) % c->size;
}

static tpurt_status_t take_message(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op, int peer);

static tpurt_status_t run_recv(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op) {
  size_t es = tpurt_dtype_size(op->dtype);
  tpurt_status_t st = TPURT_OK;
  offset_of(c, op->out, op->count * es, "recv", &st); /* only checks it is device memory */
  if (st) return st;
  int peer = op->peer;
  if (peer == TPURT_DIST_ANY_SOURCE) {
    char what[160];
    snprintf(what, sizeof(what), "sending a message (recv from any rank of %llu %s elements, tag %d) to rank %d",
             (unsigned long long)op->count, tpurt_dtype_name(op->dtype), op->tag, c->first + c->rank);
    any_wait_t w = {op->tag, c->any_next, -1};
    TPURT_RETURN_IF_ERROR(wait_for(c, missing_any, (uint64_t)(uintptr_t)&w, (waiting_t){NULL, what}));
    peer = w.found;
    c->any_next = (peer + 1) % c->size;
  }
  return take_message(c, op, peer);
}

tpurt_status_t tpurt_dist_recv_poll(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op, bool* out_received) {
  if (!c || !op || !out_received) return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: recv_poll: NULL argument");
  *out_received = false;
  if (atomic_load(&c->shm->aborted)) return aborted_status(c);
  TPURT_RETURN_IF_ERROR(validate(c, op));
  if (op->kind != TPURT_DIST_RECV || op->peer != TPURT_DIST_ANY_SOURCE)
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: recv_poll takes a recv from any source");
  tpurt_status_t st = TPURT_OK;
  offset_of(c, op->out, op->count * tpurt_dtype_size(op->dtype), "recv", &st);
  if (st) return st;
  any_wait_t w = {op->tag, c->any_next, -1};
  if (missing_any(c, (uint64_t)(uintptr_t)&w) >= 0) return TPURT_OK;
  c->any_next = (w.found + 1) % c->size;
  TPURT_RETURN_IF_ERROR(take_message(c, op, w.found));
  *out_received = true;
  return TPURT_OK;
}

/* Takes the next message from `peer` (waiting for it to be posted) into op's output. */
static tpurt_status_t take_message(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op, int peer) {
  size_t es = tpurt_dtype_size(op->dtype);
  shm_rank_t* me = &c->shm->ranks[c->rank];
  char what[160];
  uint32_t n = ++c->p2p_recvd[peer];
  if (op->peer != TPURT_DIST_ANY_SOURCE) {
    snprintf(what, sizeof(what), "sending message #%u (recv of %llu %s elements, tag %d) to rank %d", n,
             (unsigned long long)op->count, tpurt_dtype_name(op->dtype), op->tag, c->first + c->rank);
    p2p_wait_t w = {peer, n, false};
    TPURT_RETURN_IF_ERROR(wait_for(c, missing_p2p, (uint64_t)(uintptr_t)&w, (waiting_t){NULL, what}));
  }
  p2p_msg_t m = c->shm->ranks[peer].p2p_msg[c->rank][(n - 1) % P2P_DEPTH];
  if (m.count != op->count || m.dtype != (int32_t)op->dtype || m.tag != op->tag) {
    char msg[512];
    snprintf(msg, sizeof(msg), "mismatched point-to-point message #%u: rank %d sent %llu %s elements with tag %d, "
             "rank %d receives %llu %s elements with tag %d%s", n, c->first + peer, (unsigned long long)m.count,
             tpurt_dtype_name((tpurt_dtype_t)m.dtype), m.tag, c->first + c->rank, (unsigned long long)op->count,
             tpurt_dtype_name(op->dtype), op->tag, op->peer == TPURT_DIST_ANY_SOURCE ? " from any rank" : "");
    tpurt_dist_comm_abort(c, msg);
    return aborted_status(c);
  }
  memcpy(op->out, at(c, peer, m.off), op->count * es);
  atomic_store_explicit(&me->p2p_taken[peer], n, memory_order_release);
  notify(c->shm);
  if (op->out_source) *op->out_source = peer;
  return TPURT_OK;
}

static tpurt_status_t run_p2p(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op) {
  if (op->kind == TPURT_DIST_RECV) return run_recv(c, op);
  uint32_t n;
  TPURT_RETURN_IF_ERROR(post_send(c, op, &n));
  return finish_send(c, op, n);
}

/* ---- Two protocols ----
 * Call k of the group publishes its header in hdr[k & 1] and arrives at
 * barrier value 2k; once every rank has arrived, each compares the headers,
 * then data moves.
 * Small messages (each rank's part at most SLOT_BYTES) go through the
 * control block: before arriving, each rank copies its part into its slot
 * k & 1, and after the barrier every rank reads what it needs from the
 * slots. One synchronisation per call: a slot is written again at call k + 2,
 * which no rank enters before every rank has entered k + 1, that is, has
 * finished reading call k.
 * Larger messages are read and written where they lie, in the ranks' device
 * memory (each rank reduces 1/n of the message over every input and writes
 * it into every output), and the call ends with a second barrier (2k + 1),
 * so nobody reuses a buffer that a peer still reads or writes. */

typedef struct call_t {
  uint64_t seq;
  int slot;
  bool small;
} call_t;

/* The bytes each rank puts in its slot for `op`, or UINT64_MAX when the op
 * takes the large protocol. It depends only on what the headers compare,
 * so every rank chooses the same protocol (or the headers differ and the
 * call fails before any data is read). */
static uint64_t slot_bytes(const tpurt_dist_comm_t* c, const tpurt_dist_op_t* op) {
  uint64_t b = op->count * tpurt_dtype_size(op->dtype);
  switch (op->kind) {
    case TPURT_DIST_ALLREDUCE: case TPURT_DIST_REDUCE: case TPURT_DIST_BROADCAST: case TPURT_DIST_ALLGATHER:
    case TPURT_DIST_GATHER:
      break;
    case TPURT_DIST_REDUCE_SCATTER: case TPURT_DIST_SCATTER: b *= (uint64_t)c->size; break;
    case TPURT_DIST_BARRIER: return 0;
    default: return UINT64_MAX;
  }
  /* And a rank reads at most 2 slots' worth (an allreduce reads n parts):
   * beyond that, sharing the reduction (the large protocol) wins even
   * with its second synchronisation (measured on 2 and 4 chips). */
  uint64_t reads = op->count * tpurt_dtype_size(op->dtype) * (uint64_t)c->size;
  return b <= SLOT_BYTES && reads <= 2 * SLOT_BYTES ? b : UINT64_MAX;
}

static inline uint8_t* slot_at(tpurt_dist_comm_t* c, int rank, int slot) {
  return c->slots + ((size_t)rank * 2 + (size_t)slot) * SLOT_BYTES;
}

/* Publishes this rank's header (and, small, its part) and arrives. */
static tpurt_status_t call_begin(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op, call_t* out) {
  int n = c->size, r = c->rank;
  size_t es = tpurt_dtype_size(op->dtype);
  uint64_t cnt = op->count;
  uint64_t in_bytes = cnt * es, out_bytes = cnt * es;
  switch (op->kind) {
    case TPURT_DIST_ALLGATHER: out_bytes = cnt * es * n; break;
    case TPURT_DIST_REDUCE_SCATTER: in_bytes = cnt * es * n; break;
    case TPURT_DIST_GATHER: out_bytes = r == op->root ? cnt * es * n : 0; break;
    case TPURT_DIST_SCATTER: in_bytes = r == op->root ? cnt * es * n : 0; break;
    case TPURT_DIST_ALLTOALL: {
      in_bytes = out_bytes = 0;
      for (int p = 0; p < n; ++p) {
        uint64_t s_end = (op->send_offsets[p] + op->send_counts[p]) * es;
        uint64_t r_end = (op->recv_offsets[p] + op->recv_counts[p]) * es;
        if (s_end > in_bytes) in_bytes = s_end;
        if (r_end > out_bytes) out_bytes = r_end;
      }
      break;
    }
    default: break;
  }
  tpurt_status_t st = TPURT_OK;
  shm_rank_t* me = &c->shm->ranks[r];
  uint64_t seq = ++c->seq;
  int slot = (int)(seq & 1);
  me->hdr[slot] = (header_t){seq, op->kind, op->dtype, op->redop, op->root, op->part_of, cnt,
                             offset_of(c, op->in, in_bytes, "input", &st), offset_of(c, op->out, out_bytes, "output", &st)};
  if (st) {
    /* Our peers are waiting for us: they learn why. */
    char msg[600];
    snprintf(msg, sizeof(msg), "rank %d: %s", c->first + r, tpurt_status_message(st));
    tpurt_dist_comm_abort(c, msg);
    return st;
  }
  if (op->kind == TPURT_DIST_ALLTOALL)
    for (int p = 0; p < n; ++p) {
      me->send_counts[p] = op->send_counts[p];
      me->send_offsets[p] = op->send_offsets[p];
      me->recv_counts[p] = op->recv_counts[p];
      me->recv_offsets[p] = op->recv_offsets[p];
    }
  uint64_t sb = slot_bytes(c, op);
  bool gives = !(op->kind == TPURT_DIST_BROADCAST || op->kind == TPURT_DIST_SCATTER) || r == op->root;
  if (sb != UINT64_MAX && sb && gives) memcpy(slot_at(c, r, slot), op->in, sb);
  *out = (call_t){seq, slot, sb != UINT64_MAX};
  /* Barrier values: 1 was the join; call k enters at 2k and leaves at 2k+1. */
  arrive(c, (uint32_t)(2 * seq));
  return TPURT_OK;
}

static bool call_arrived(tpurt_dist_comm_t* c, const call_t* call) {
  return missing_arrive(c, 2 * call->seq) < 0;
}

/* The small protocol's data movement: everything from the slots. */
static void small_data(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op, const header_t* h, int slot) {
  int n = c->size, r = c->rank;
  size_t es = tpurt_dtype_size(op->dtype);
  uint64_t cnt = op->count, bytes = cnt * es;
  const uint8_t* sl[MAXR];
  for (int p = 0; p < n; ++p) sl[p] = slot_at(c, p, slot);
  uint8_t* out = op->out;
  switch (op->kind) {
    case TPURT_DIST_ALLREDUCE: reduce_range(c, h, sl, &out, 1, 0, cnt); break;
    case TPURT_DIST_REDUCE:
      if (r == op->root) reduce_range(c, h, sl, &out, 1, 0, cnt);
      break;
    case TPURT_DIST_REDUCE_SCATTER: {
      const uint8_t* part[MAXR];
      for (int p = 0; p < n; ++p) part[p] = sl[p] + (uint64_t)r * bytes;
      reduce_range(c, h, part, &out, 1, 0, cnt);
      break;
    }
    case TPURT_DIST_BROADCAST:
      if (r != op->root) memcpy(out, sl[op->root], bytes);
      else if (op->out != op->in) memmove(op->out, op->in, bytes);
      break;
    case TPURT_DIST_ALLGATHER:
      for (int p = 0; p < n; ++p) memcpy(out + (uint64_t)p * bytes, sl[p], bytes);
      break;
    case TPURT_DIST_GATHER:
      if (r == op->root)
        for (int p = 0; p < n; ++p) memcpy(out + (uint64_t)p * bytes, sl[p], bytes);
      break;
    case TPURT_DIST_SCATTER: memcpy(out, sl[op->root] + (uint64_t)r * bytes, bytes); break;
    default: break;
  }
}

/* Waits for every rank's arrival, compares the headers, moves the data. */
static tpurt_status_t call_finish(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op, const call_t* call) {
  int n = c->size, r = c->rank;
  const header_t* h = &c->shm->ranks[r].hdr[call->slot];
  waiting_t what = {h, NULL};
  TPURT_RETURN_IF_ERROR(wait_for(c, missing_arrive, 2 * call->seq, what));
  TPURT_RETURN_IF_ERROR(check_headers(c, call->slot));
  if (call->small) {
    small_data(c, op, h, call->slot);
    return TPURT_OK;
  }
  size_t es = tpurt_dtype_size(op->dtype);
  uint64_t cnt = op->count;
  const uint8_t* ins[MAXR];
  uint8_t* outs[MAXR];
  uint64_t in_off[MAXR];
  for (int p = 0; p < n; ++p) {
    const header_t* hp = &c->shm->ranks[p].hdr[call->slot];
    in_off[p] = hp->in_off;
    ins[p] = hp->in_off == UINT64_MAX ? NULL : at(c, p, hp->in_off);
    outs[p] = hp->out_off == UINT64_MAX ? NULL : at(c, p, hp->out_off);
  }
  /* Streaming stores for a large copy: its output's bytes per rank (all_to_all: what this rank receives). */
  uint64_t out_bytes = cnt * es;
  if (op->kind == TPURT_DIST_ALLGATHER || op->kind == TPURT_DIST_GATHER) out_bytes *= (uint64_t)n;
  if (op->kind == TPURT_DIST_ALLTOALL)
    for (int p = 0; p < n; ++p) out_bytes += op->recv_counts[p] * es;
  bool stream = out_bytes >= STREAM_MIN_BYTES;
  switch (op->kind) {
    case TPURT_DIST_ALLREDUCE:
    case TPURT_DIST_REDUCE: {
      /* Rank r owns elements [r*cnt/n, (r+1)*cnt/n): it reduces them over every
       * input and writes them to every output (reduce: the root's). */
      uint64_t lo = cnt * (uint64_t)r / n, hi = cnt * (uint64_t)(r + 1) / n;
      if (op->kind == TPURT_DIST_REDUCE) reduce_range(c, h, ins, &outs[op->root], 1, lo, hi);
      else reduce_range(c, h, ins, outs, n, lo, hi);
      break;
    }
    case TPURT_DIST_REDUCE_SCATTER: {
      const uint8_t* part[MAXR];
      for (int p = 0; p < n; ++p) part[p] = ins[p] + (uint64_t)r * cnt * es;
      reduce_range(c, h, part, &outs[r], 1, 0, cnt);
      break;
    }
    case TPURT_DIST_BROADCAST:
      if (op->out && op->out != ins[op->root]) {
        const uint8_t *o = op->out, *i = ins[op->root];
        if (stream && (o + cnt * es <= i || i + cnt * es <= o)) tpurt_stream_copy(op->out, i, cnt * es);
        else memmove(op->out, i, cnt * es); /* the root's own buffers may overlap */
      }
      break;
    case TPURT_DIST_ALLGATHER:
      for (int k = 0; k < n; ++k) {
        int p = (r + k) % n; /* each rank starts at its own piece: spreads the reads */
        put((uint8_t*)op->out + (uint64_t)p * cnt * es, ins[p], cnt * es, stream);
      }
      break;
    case TPURT_DIST_GATHER:
      if (r == op->root)
        for (int p = 0; p < n; ++p) put((uint8_t*)op->out + (uint64_t)p * cnt * es, ins[p], cnt * es, stream);
      break;
    case TPURT_DIST_SCATTER:
      put(op->out, ins[op->root] + (uint64_t)r * cnt * es, cnt * es, stream);
      break;
    case TPURT_DIST_ALLTOALL:
      for (int k = 0; k < n; ++k) {
        int p = (r + k) % n;
        const shm_rank_t* pr = &c->shm->ranks[p];
        put((uint8_t*)op->out + op->recv_offsets[p] * es, at(c, p, in_off[p] + pr->send_offsets[r] * es),
            op->recv_counts[p] * es, stream);
      }
      break;
    default: break;
  }
  /* Nobody reuses its buffers until every peer is done reading and writing them. */
  return barrier(c, (uint32_t)(2 * call->seq + 1), what);
}

tpurt_status_t tpurt_dist_run(tpurt_dist_comm_t* c, const tpurt_dist_op_t* op) {
  if (!c || !op) return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: NULL communicator or op");
  if (atomic_load(&c->shm->aborted)) return aborted_status(c);
  TPURT_RETURN_IF_ERROR(validate(c, op));
  if (op->kind == TPURT_DIST_SEND || op->kind == TPURT_DIST_RECV) return run_p2p(c, op);
  call_t call;
  TPURT_RETURN_IF_ERROR(call_begin(c, op, &call));
  return call_finish(c, op, &call);
}

/* A group posts every send before waiting for any: at most P2P_DEPTH to one peer. */
static tpurt_status_t check_group_sends(const tpurt_dist_comm_t* c, const tpurt_dist_op_t* ops, int n) {
  int per_peer[MAXR] = {0};
  for (int i = 0; i < n; ++i) {
    if (ops[i].kind != TPURT_DIST_SEND || ops[i].peer < 0 || ops[i].peer >= c->size) continue;
    if (++per_peer[ops[i].peer] > P2P_DEPTH)
      return TPURT_STATUS(UNIMPLEMENTED, "tpu_dist: a group (batch_isend_irecv) holds more than %d sends to rank %d; "
                          "split it", P2P_DEPTH, ops[i].peer);
  }
  return TPURT_OK;
}

tpurt_status_t tpurt_dist_run_group(tpurt_dist_comm_t* c, const tpurt_dist_op_t* ops, int n) {
  if (!c || (n && !ops) || n < 0) return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: run_group: bad arguments");
  if (atomic_load(&c->shm->aborted)) return aborted_status(c);
  for (int i = 0; i < n; ++i) TPURT_RETURN_IF_ERROR(validate(c, &ops[i]));
  TPURT_RETURN_IF_ERROR(check_group_sends(c, ops, n));
  /* Sends first (posting never waits), then everything else in order, then
   * the sends' completions: a ring of send+recv pairs cannot deadlock. */
  uint32_t* seqs = calloc((size_t)n + 1, sizeof(uint32_t));
  if (!seqs) return TPURT_STATUS(RESOURCE_EXHAUSTED, "tpu_dist: out of host memory");
  tpurt_status_t st = TPURT_OK;
  for (int i = 0; i < n && !st; ++i)
    if (ops[i].kind == TPURT_DIST_SEND) st = post_send(c, &ops[i], &seqs[i]);
  for (int i = 0; i < n && !st; ++i)
    if (ops[i].kind != TPURT_DIST_SEND) st = tpurt_dist_run(c, &ops[i]);
  for (int i = 0; i < n && !st; ++i)
    if (ops[i].kind == TPURT_DIST_SEND) st = finish_send(c, &ops[i], seqs[i]);
  free(seqs);
  return st;
}

/* ---- on a queue ---- */

/* Waits for the collectives issued before `ticket` (on any queue). An
 * earlier one that cannot finish fails by its own timeout, which aborts the
 * group, so this wait ends too. */
static void ticket_wait(tpurt_dist_comm_t* c, uint32_t ticket) {
  for (;;) {
    uint32_t done = atomic_load(&c->done_ticket);
    if (done == ticket) return;
    tpurt_futex_wait_ns(&c->done_ticket, done, 50000000ull);
  }
}

static void ticket_done(tpurt_dist_comm_t* c) {
  atomic_fetch_add(&c->done_ticket, 1);
  tpurt_futex_wake_all(&c->done_ticket);
}

typedef struct queued_t {
  tpurt_dist_comm_t* comm;
  uint32_t ticket;
  bool begun; /* call_begin ran on the submitting thread: the queue finishes it */
  call_t call;
  tpurt_dist_op_t op;
  uint64_t counts[4 * MAXR];
} queued_t;

static tpurt_status_t run_queued(void* user) {
  queued_t* q = user;
  ticket_wait(q->comm, q->ticket);
  tpurt_status_t s = q->begun ? call_finish(q->comm, &q->op, &q->call) : tpurt_dist_run(q->comm, &q->op);
  ticket_done(q->comm);
  free(q);
  return s;
}

/* A small collective issued on an idle queue, with nothing of the group
 * pending, starts on the submitting thread: its input is final (nothing
 * queued before it), so it is published at once, and when every peer has
 * arrived within INLINE_WAIT_NS the call also ends here, with no hand-over
 * to the queue's thread and back (two wake-ups that dominate a small
 * collective's latency when the cores are shared). Otherwise the queue
 * finishes it, in order with what is submitted after. Like a kernel run
 * inline, it takes the submitting thread to be the stream's only submitter
 * meanwhile (another thread's work on the same stream at the same moment is
 * unordered with it anyway). Returns true when the call is over
 * (*out_status: its result). */
static bool try_inline(tpurt_dist_comm_t* c, tpurt_queue_t* queue, queued_t* q, tpurt_status_t* out_status) {
  if (slot_bytes(c, &q->op) == UINT64_MAX || atomic_load(&c->done_ticket) != q->ticket || !tpurt_queue_is_idle(queue))
    return false;
  tpurt_status_t st = atomic_load(&c->shm->aborted) ? aborted_status(c) : validate(c, &q->op);
  if (!st) st = call_begin(c, &q->op, &q->call);
  if (st) {
    *out_status = st;
    return true;
  }
  uint64_t t0 = tpurt_now_ns();
  for (int i = 0; !call_arrived(c, &q->call) && !atomic_load(&c->shm->aborted); ++i) {
    if ((i & 15) == 15 && tpurt_now_ns() - t0 > INLINE_WAIT_NS) {
      q->begun = true;
      return false;
    }
    if (i < 64) tpurt_cpu_relax();
    else sched_yield();
  }
  *out_status = call_finish(c, &q->op, &q->call);
  return true;
}

typedef struct queued_host_t {
  tpurt_dist_comm_t* comm;
  uint32_t ticket;
  tpurt_status_t (*fn)(void* user);
  void* user;
} queued_host_t;

static tpurt_status_t run_queued_host(void* user) {
  queued_host_t* h = user;
  ticket_wait(h->comm, h->ticket);
  _Atomic uint32_t* away = &h->comm->shm->ranks[h->comm->rank].between_hosts;
  atomic_store(away, 1);
  tpurt_status_t s = h->fn(h->user); /* it owns user, and asks tpurt_dist_comm_error itself */
  atomic_store(away, 0);
  /* The host's other ranks must not run their next step without this one. */
  if (s && !atomic_load(&h->comm->shm->aborted)) tpurt_dist_comm_abort(h->comm, tpurt_status_message(s));
  ticket_done(h->comm);
  free(h);
  return s;
}

tpurt_status_t tpurt_dist_enqueue_host(tpurt_dist_comm_t* c, tpurt_queue_t* queue, tpurt_status_t (*fn)(void* user),
                                       void* user) {
  if (!c || !queue || !fn) return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: enqueue_host: NULL argument");
  queued_host_t* h = malloc(sizeof(*h));
  if (!h) return TPURT_STATUS(RESOURCE_EXHAUSTED, "tpu_dist: out of host memory");
  h->comm = c;
  h->fn = fn;
  h->user = user;
  h->ticket = atomic_fetch_add(&c->next_ticket, 1);
  tpurt_status_t s = tpurt_queue_submit_host_fn_named(queue, run_queued_host, h, "tpu_dist between hosts");
  if (s) {
    free(h);
    ticket_done(c);
  }
  return s;
}

typedef struct queued_group_t {
  tpurt_dist_comm_t* comm;
  uint32_t ticket;
  int n;
  tpurt_dist_op_t ops[];
} queued_group_t;

static tpurt_status_t run_queued_group(void* user) {
  queued_group_t* g = user;
  ticket_wait(g->comm, g->ticket);
  tpurt_status_t s = tpurt_dist_run_group(g->comm, g->ops, g->n);
  ticket_done(g->comm);
  free(g);
  return s;
}

tpurt_status_t tpurt_dist_enqueue_group(tpurt_dist_comm_t* c, tpurt_queue_t* queue, const tpurt_dist_op_t* ops,
                                        int n) {
  if (!c || !queue || n < 0 || (n && !ops)) return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: enqueue_group: bad arguments");
  int a2a = 0;
  for (int i = 0; i < n; ++i) {
    if (ops[i].kind != TPURT_DIST_ALLTOALL) continue;
    if (!ops[i].send_counts || !ops[i].send_offsets || !ops[i].recv_counts || !ops[i].recv_offsets)
      return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: all_to_all needs send/recv counts and offsets");
    ++a2a;
  }
  TPURT_RETURN_IF_ERROR(check_group_sends(c, ops, n));
  /* The ops, then each all_to_all's four count arrays: the caller's may be
   * gone when the queue runs the group. */
  size_t ops_bytes = (size_t)n * sizeof(tpurt_dist_op_t), per = (size_t)c->size * sizeof(uint64_t);
  queued_group_t* g = malloc(sizeof(*g) + ops_bytes + (size_t)a2a * 4 * per);
  if (!g) return TPURT_STATUS(RESOURCE_EXHAUSTED, "tpu_dist: out of host memory");
  g->comm = c;
  g->n = n;
  memcpy(g->ops, ops, ops_bytes);
  uint64_t* counts = (uint64_t*)((uint8_t*)g->ops + ops_bytes);
  for (int i = 0; i < n; ++i) {
    tpurt_dist_op_t* o = &g->ops[i];
    if (o->kind != TPURT_DIST_ALLTOALL) continue;
    const uint64_t* src[4] = {o->send_counts, o->send_offsets, o->recv_counts, o->recv_offsets};
    for (int k = 0; k < 4; ++k) memcpy(counts + (size_t)k * c->size, src[k], per);
    o->send_counts = counts;
    o->send_offsets = counts + c->size;
    o->recv_counts = counts + 2 * c->size;
    o->recv_offsets = counts + 3 * c->size;
    counts += 4 * (size_t)c->size;
  }
  /* Submitters of one communicator serialize (c10d calls from one thread at
   * a time per group), so ticket order is submit order. */
  g->ticket = atomic_fetch_add(&c->next_ticket, 1);
  tpurt_status_t s = tpurt_queue_submit_host_fn_named(queue, run_queued_group, g, "tpu_dist group");
  if (s) {
    free(g);
    ticket_done(c); /* nobody will run this ticket */
  }
  return s;
}

/* A send outside the issue order: it touches only this rank's state for its
 * peer (the message slots and counts), which no collective touches, so it may
 * run beside them on another queue's thread. */
typedef struct queued_send_t {
  tpurt_dist_comm_t* comm;
  tpurt_dist_op_t op;
} queued_send_t;

static tpurt_status_t run_queued_send(void* user) {
  queued_send_t* q = user;
  tpurt_status_t s = tpurt_dist_run(q->comm, &q->op);
  free(q);
  return s;
}

tpurt_status_t tpurt_dist_enqueue_send(tpurt_dist_comm_t* c, tpurt_queue_t* queue, const tpurt_dist_op_t* op) {
  if (!c || !queue || !op) return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: enqueue_send: NULL argument");
  if (op->kind != TPURT_DIST_SEND)
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: enqueue_send takes a send, got %s", tpurt_dist_kind_name(op->kind));
  TPURT_RETURN_IF_ERROR(validate(c, op));
  queued_send_t* q = malloc(sizeof(*q));
  if (!q) return TPURT_STATUS(RESOURCE_EXHAUSTED, "tpu_dist: out of host memory");
  q->comm = c;
  q->op = *op;
  tpurt_status_t s = tpurt_queue_submit_host_fn_named(queue, run_queued_send, q, trace_names[TPURT_DIST_SEND]);
  if (s) free(q);
  return s;
}

tpurt_status_t tpurt_dist_enqueue(tpurt_dist_comm_t* c, tpurt_queue_t* queue, const tpurt_dist_op_t* op) {
  if (!c || !queue || !op) return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: enqueue: NULL argument");
  queued_t* q = malloc(sizeof(*q));
  if (!q) return TPURT_STATUS(RESOURCE_EXHAUSTED, "tpu_dist: out of host memory");
  q->comm = c;
  q->op = *op;
  if (op->kind == TPURT_DIST_ALLTOALL && op->send_counts && op->send_offsets && op->recv_counts && op->recv_offsets) {
    int n = c->size;
    memcpy(q->counts, op->send_counts, n * sizeof(uint64_t));
    memcpy(q->counts + MAXR, op->send_offsets, n * sizeof(uint64_t));
    memcpy(q->counts + 2 * MAXR, op->recv_counts, n * sizeof(uint64_t));
    memcpy(q->counts + 3 * MAXR, op->recv_offsets, n * sizeof(uint64_t));
    q->op.send_counts = q->counts;
    q->op.send_offsets = q->counts + MAXR;
    q->op.recv_counts = q->counts + 2 * MAXR;
    q->op.recv_offsets = q->counts + 3 * MAXR;
  }
  q->ticket = atomic_fetch_add(&c->next_ticket, 1);
  q->begun = false;
  tpurt_status_t s = TPURT_OK;
  if (try_inline(c, queue, q, &s)) {
    ticket_done(c);
    free(q);
    return s;
  }
  s = tpurt_queue_submit_host_fn_named(queue, run_queued, q,
                                       op->kind > 0 && op->kind < TPURT_DIST_KIND_COUNT ? trace_names[op->kind] : NULL);
  if (s) {
    /* Peers may already wait for this call (begun): they learn why. */
    if (q->begun) tpurt_dist_comm_abort(c, tpurt_status_message(s));
    free(q);
    ticket_done(c); /* nobody will run this ticket */
  }
  return s;
}
