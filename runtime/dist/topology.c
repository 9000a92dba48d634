/* A host's chips as a torus (TORCH_TPU_TOPOLOGY), this process's chip, and
 * the topology-aware rank layout for device meshes. Chip ids run x fastest:
 * id = x + X * (y + Y * z). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "tpurt/dist.h"

tpurt_status_t tpurt_dist_topology_parse(const char* spec, tpurt_dist_topology_t* out) {
  if (!out) return TPURT_STATUS(INVALID_ARGUMENT, "topology_parse: NULL out_topology");
  memset(out, 0, sizeof(*out));
  for (int i = 0; i < TPURT_DIST_MAX_AXES; ++i) out->dims[i] = 1;
  if (!spec || !*spec)
    return TPURT_STATUS(INVALID_ARGUMENT, "topology: empty; expected axes such as 2x2 or 2x2x1");
  const char* p = spec;
  int n = 0;
  long total = 1;
  while (*p) {
    char* end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > TPURT_DIST_MAX_RANKS || n == TPURT_DIST_MAX_AXES)
      goto bad;
    out->dims[n++] = (int)v;
    total *= v;
    if (total > TPURT_DIST_MAX_RANKS) goto bad;
    p = end;
    if (*p == 'x' || *p == 'X') {
      ++p;
      if (!*p) goto bad;
    } else if (*p) {
      goto bad;
    }
  }
  out->ndims = n;
  out->num_chips = (int)total;
  return TPURT_OK;
bad:
  return TPURT_STATUS(INVALID_ARGUMENT, "topology '%s': expected 1 to %d axes of chips such as 2x2 or 2x2x1 "
                      "(at most %d chips on a host)", spec, TPURT_DIST_MAX_AXES, TPURT_DIST_MAX_RANKS);
}

static tpurt_status_t check_chip(const tpurt_dist_topology_t* t, int chip) {
  if (!t || t->num_chips < 1) return TPURT_STATUS(INVALID_ARGUMENT, "topology: NULL or empty");
  if (chip < 0 || chip >= t->num_chips)
    return TPURT_STATUS(OUT_OF_RANGE, "topology: chip %d out of range (the host has %d chips)", chip,
                        t->num_chips);
  return TPURT_OK;
}

tpurt_status_t tpurt_dist_topology_coords(const tpurt_dist_topology_t* t, int chip,
                                          int out[TPURT_DIST_MAX_AXES]) {
  TPURT_RETURN_IF_ERROR(check_chip(t, chip));
  for (int a = 0; a < TPURT_DIST_MAX_AXES; ++a) {
    out[a] = chip % t->dims[a];
    chip /= t->dims[a];
  }
  return TPURT_OK;
}

static int chip_of(const tpurt_dist_topology_t* t, const int c[TPURT_DIST_MAX_AXES]) {
  return c[0] + t->dims[0] * (c[1] + t->dims[1] * c[2]);
}

static int cmp_int(const void* a, const void* b) { return *(const int*)a - *(const int*)b; }

tpurt_status_t tpurt_dist_topology_neighbors(const tpurt_dist_topology_t* t, int chip,
                                             int out[2 * TPURT_DIST_MAX_AXES], int* out_count) {
  int c[TPURT_DIST_MAX_AXES];
  TPURT_RETURN_IF_ERROR(tpurt_dist_topology_coords(t, chip, c));
  int n = 0;
  for (int a = 0; a < TPURT_DIST_MAX_AXES; ++a) {
    int d = t->dims[a];
    if (d < 2) continue;
    for (int step = -1; step <= 1; step += 2) {
      int nc[TPURT_DIST_MAX_AXES] = {c[0], c[1], c[2]};
      nc[a] = (c[a] + step + d) % d; /* wrap-around link: each axis is a ring */
      int id = chip_of(t, nc), dup = 0;
      for (int i = 0; i < n; ++i) dup |= out[i] == id;
      if (!dup && id != chip) out[n++] = id;
    }
  }
  qsort(out, (size_t)n, sizeof(int), cmp_int);
  *out_count = n;
  return TPURT_OK;
}

/* One factor of the physical chips a mesh dimension walks: an axis, or a
 * contiguous piece of one (inner factor `stride` apart). */
typedef struct factor_t {
  int axis, size, stride;
} factor_t;

tpurt_status_t tpurt_dist_mesh_layout(const tpurt_dist_topology_t* t, int nd, const int64_t* mesh,
                                      const int64_t* dcn, int64_t* out, int64_t cap) {
  if (!t || t->num_chips < 1 || !mesh || !out || nd < 1 || nd > 8)
    return TPURT_STATUS(INVALID_ARGUMENT, "mesh_layout: bad arguments (mesh of 1 to 8 dimensions)");
  int64_t ici = 1, hosts = 1;
  for (int i = 0; i < nd; ++i) {
    if (mesh[i] < 1 || (dcn && dcn[i] < 1))
      return TPURT_STATUS(INVALID_ARGUMENT, "mesh_layout: mesh dimension %d has size %lld", i,
                          (long long)mesh[i]);
    ici *= mesh[i];
    hosts *= dcn ? dcn[i] : 1;
  }
  if (ici != t->num_chips)
    return TPURT_STATUS(INVALID_ARGUMENT, "mesh_layout: the mesh shape's product (%lld) must be the host's chip "
                        "count (%d, topology %dx%dx%d); put hosts in dcn_mesh_shape", (long long)ici,
                        t->num_chips, t->dims[0], t->dims[1], t->dims[2]);
  if (ici * hosts > cap) return TPURT_STATUS(INVALID_ARGUMENT, "mesh_layout: output holds %lld entries, "
                                             "needs %lld", (long long)cap, (long long)(ici * hosts));
  /* Assign physical factors to mesh dimensions, last dimension first, axes
   * x first; an axis larger than what a dimension needs is split (its inner
   * part goes to that dimension). */
  factor_t fac[8][TPURT_DIST_MAX_AXES * 2];
  int nfac[8] = {0};
  /* Last dimension first: a dimension the size of an untouched axis takes
   * that axis (a ring); any other walks the unused axes in order, x first,
   * splitting one when it needs only part of it. */
  int taken[TPURT_DIST_MAX_AXES] = {1, 1, 1}; /* stride already used on each axis */
  for (int i = nd - 1; i >= 0; --i) {
    int64_t need = mesh[i];
    if (need == 1) continue;
    int exact = -1;
    for (int a = 0; a < TPURT_DIST_MAX_AXES && exact < 0; ++a)
      if (taken[a] == 1 && t->dims[a] == need) exact = a;
    if (exact >= 0) {
      fac[i][nfac[i]++] = (factor_t){exact, (int)need, 1};
      taken[exact] = t->dims[exact];
      continue;
    }
    for (int a = 0; a < TPURT_DIST_MAX_AXES && need > 1; ++a) {
      int left = t->dims[a] / taken[a];
      if (left == 1) continue;
      int take;
      if (need % left == 0) take = left;
      else if (left % need == 0) take = (int)need;
      else
        return TPURT_STATUS(INVALID_ARGUMENT, "mesh_layout: mesh dimension %d of size %lld does not fit the "
                            "topology %dx%dx%d's axes (it must be a product of whole axes or divide one)",
                            i, (long long)mesh[i], t->dims[0], t->dims[1], t->dims[2]);
      fac[i][nfac[i]++] = (factor_t){a, take, taken[a]};
      taken[a] *= take;
      need /= take;
    }
    if (need > 1)
      return TPURT_STATUS(INVALID_ARGUMENT, "mesh_layout: mesh dimension %d of size %lld does not fit what is left "
                          "of the topology %dx%dx%d", i, (long long)mesh[i], t->dims[0], t->dims[1], t->dims[2]);
  }
  /* Walk every mesh index; each dimension's own index is decoded over its
   * factors as a reflected Gray code (snake order). */
  int64_t pos[8] = {0};
  for (int64_t k = 0; k < ici; ++k) {
    int c[TPURT_DIST_MAX_AXES] = {0, 0, 0};
    int64_t rem = k;
    for (int i = nd - 1; i >= 0; --i) {
      pos[i] = rem % mesh[i];
      rem /= mesh[i];
    }
    for (int i = 0; i < nd; ++i) {
      int64_t v = pos[i];
      /* Digits, first factor fastest. Snake order: a digit runs backwards
       * when the index formed by the digits above it is odd. */
      int64_t hi = v;
      for (int f = 0; f < nfac[i]; ++f) {
        int d = (int)(hi % fac[i][f].size);
        hi /= fac[i][f].size;
        if (hi & 1) d = fac[i][f].size - 1 - d;
        c[fac[i][f].axis] += d * fac[i][f].stride;
      }
    }
    int chip = chip_of(t, c);
    /* Hosts: mesh index (h_d * mesh_d + m_d) per dimension. */
    for (int64_t h = 0; h < hosts; ++h) {
      int64_t hrem = h, idx = 0, stride_all = 1;
      int64_t hpos[8];
      for (int i = nd - 1; i >= 0; --i) {
        int64_t dd = dcn ? dcn[i] : 1;
        hpos[i] = hrem % dd;
        hrem /= dd;
      }
      for (int i = nd - 1; i >= 0; --i) {
        int64_t dd = dcn ? dcn[i] : 1;
        idx += (hpos[i] * mesh[i] + pos[i]) * stride_all;
        stride_all *= dd * mesh[i];
      }
      out[idx] = h * ici + chip;
    }
  }
  return TPURT_OK;
}

tpurt_status_t tpurt_dist_host_config(tpurt_dist_host_config_t* out) {
  memset(out, 0, sizeof(*out));
  const char* spec = tpurt_env_str("TORCH_TPU_TOPOLOGY");
  if (!spec) {
    tpurt_dist_topology_parse("1", &out->topology);
    out->chips_on_host = 1;
    return TPURT_OK;
  }
  TPURT_RETURN_IF_ERROR(tpurt_status_annotate(tpurt_dist_topology_parse(spec, &out->topology),
                                              "TORCH_TPU_TOPOLOGY"));
  int n = out->topology.num_chips;
  out->chips_on_host = n;
  int chip = 0;
  const char* vis = tpurt_env_str("TPU_VISIBLE_CHIPS");
  if (vis) {
    char* end;
    long v = strtol(vis, &end, 10);
    if (end == vis || *end || v < 0 || v >= n)
      return TPURT_STATUS(INVALID_ARGUMENT, "TPU_VISIBLE_CHIPS=%s: expected one chip id from 0 to %d "
                          "(TORCH_TPU_TOPOLOGY=%s)", vis, n - 1, spec);
    chip = (int)v;
  } else if (tpurt_env_str("LOCAL_RANK")) {
    int lr = 0;
    tpurt_status_t s = tpurt_env_int("LOCAL_RANK", 0, 1 << 20, &lr);
    if (s) return s;
    if (lr >= n) {
      return TPURT_STATUS(INVALID_ARGUMENT, "LOCAL_RANK=%d but TORCH_TPU_TOPOLOGY=%s has %d chips: start at most "
                          "one process per chip on a host", lr, spec, n);
    }
    chip = lr;
  }
  out->chip = chip;
  return TPURT_OK;
}
