/* The fused LSTM and GRU cells that nn.LSTM/nn.GRU/nn.LSTMCell/nn.GRUCell call
 * on an accelerator (ATen's RNN.cpp routes PrivateUse1 here): the gate
 * nonlinearities and the state update after the two gate matmuls, and their
 * backward. Gate order and workspace layout are CUDA's (ATen's
 * native/cuda/RNN.cu), so autograd's saved tensors mean the same thing. */
#include <math.h>

#include "ops/train/train.h"

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* [B, G*H] gates, [B, H] state; with `biases`, args 3 and 4 are optional
 * [G*H] biases. */
static tpurt_status_t check_cell(const tpurt_op_call_t* c, const tpurt_tensor_t* ig, const tpurt_tensor_t* hg,
                                 const tpurt_tensor_t* state, int g, bool biases, int64_t* out_b, int64_t* out_h) {
  if (!ig || !hg || !state || ig->ndim != 2 || !tpurt_tensor_same_shape(ig, hg) || state->ndim != 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected 2-D gates of one shape and a 2-D state", c->name);
  int64_t b = ig->sizes[0], h = state->sizes[1];
  if (state->sizes[0] != b || ig->sizes[1] != g * h)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: gates [%lld, %lld] do not match the state [%lld, %lld] (%d gates)",
                        c->name, (long long)ig->sizes[0], (long long)ig->sizes[1], (long long)state->sizes[0],
                        (long long)h, g);
  for (int k = 3; biases && k <= 4; ++k) {
    const tpurt_tensor_t* bias = tpurt_arg_tensor(c, k);
    if (bias && tpurt_tensor_numel(bias) != g * h)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: bias of %lld elements, expected %lld", c->name,
                          (long long)tpurt_tensor_numel(bias), (long long)(g * h));
  }
  *out_b = b;
  *out_h = h;
  return TPURT_OK;
}

typedef struct cell_job_t {
  tpurt_train_view_t ig, hg, state, bi, bh; /* bi/bh .t NULL without bias */
  tpurt_train_view_t out0, out1, ws;        /* lstm: hy, cy, ws; gru: hy, ws */
  int64_t h;
} cell_job_t;

static double bias_at(tpurt_train_view_t v, int64_t j) { return v.t ? tpurt_train_ld(v, j) : 0.0; }

/* _thnn_fused_lstm_cell(igates, hgates, cx, b_ih?, b_hh?) -> (hy, cy, workspace):
 * gates i, f, g, o; workspace holds them activated. */
static void lstm_rows(void* user, int64_t begin, int64_t end, int tid) {
  const cell_job_t* j = user;
  const int64_t h = j->h, gh = 4 * h;
  for (int64_t b = begin; b < end; ++b) {
    for (int64_t k = 0; k < h; ++k) {
      double a[4];
      for (int q = 0; q < 4; ++q) {
        int64_t col = q * h + k, e = b * gh + col;
        a[q] = tpurt_train_ld(j->ig, e) + tpurt_train_ld(j->hg, e) + bias_at(j->bi, col) + bias_at(j->bh, col);
      }
      double ig = sigm(a[0]), fg = sigm(a[1]), cg = tanh(a[2]), og = sigm(a[3]);
      double cx = tpurt_train_ld(j->state, b * h + k);
      double cy = fg * cx + ig * cg;
      double hy = og * tanh(cy);
      tpurt_train_st(j->out0, b * h + k, hy);
      tpurt_train_st(j->out1, b * h + k, cy);
      tpurt_train_st(j->ws, b * gh + k, ig);
      tpurt_train_st(j->ws, b * gh + h + k, fg);
      tpurt_train_st(j->ws, b * gh + 2 * h + k, cg);
      tpurt_train_st(j->ws, b * gh + 3 * h + k, og);
    }
  }
}

/* _thnn_fused_gru_cell(igates, hgates, hx, b_ih?, b_hh?) -> (hy, workspace):
 * gates r, z, n; workspace [B, 5H] = r, z, n, hx, hn (hn with its bias). */
static void gru_rows(void* user, int64_t begin, int64_t end, int tid) {
  const cell_job_t* j = user;
  const int64_t h = j->h, gh = 3 * h;
  for (int64_t b = begin; b < end; ++b) {
    for (int64_t k = 0; k < h; ++k) {
      int64_t e = b * gh + k;
      double ir = tpurt_train_ld(j->ig, e) + bias_at(j->bi, k);
      double hr = tpurt_train_ld(j->hg, e) + bias_at(j->bh, k);
      double iz = tpurt_train_ld(j->ig, e + h) + bias_at(j->bi, h + k);
      double hz = tpurt_train_ld(j->hg, e + h) + bias_at(j->bh, h + k);
      double in = tpurt_train_ld(j->ig, e + 2 * h) + bias_at(j->bi, 2 * h + k);
      double hn = tpurt_train_ld(j->hg, e + 2 * h) + bias_at(j->bh, 2 * h + k);
      double rg = sigm(ir + hr), zg = sigm(iz + hz);
      double ng = tanh(in + rg * hn);
      double hx = tpurt_train_ld(j->state, b * h + k);
      tpurt_train_st(j->out0, b * h + k, ng + zg * (hx - ng));
      int64_t w = b * 5 * h + k;
      tpurt_train_st(j->out1, w, rg);
      tpurt_train_st(j->out1, w + h, zg);
      tpurt_train_st(j->out1, w + 2 * h, ng);
      tpurt_train_st(j->out1, w + 3 * h, hx);
      tpurt_train_st(j->out1, w + 4 * h, hn);
    }
  }
}

static tpurt_status_t cell_forward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool lstm) {
  const int g = lstm ? 4 : 3;
  int64_t b = 0, h = 0;
  tpurt_status_t st = check_cell(c, tpurt_arg_tensor(c, 0), tpurt_arg_tensor(c, 1), tpurt_arg_tensor(c, 2), g, true, &b, &h);
  if (st) return st;
  if (c->num_outputs < (lstm ? 3 : 2)) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing outputs", c->name);
  cell_job_t j = {
      .ig = tpurt_train_view(tpurt_arg_tensor(c, 0)),
      .hg = tpurt_train_view(tpurt_arg_tensor(c, 1)),
      .state = tpurt_train_view(tpurt_arg_tensor(c, 2)),
      .bi = tpurt_train_view(tpurt_arg_tensor(c, 3)),
      .bh = tpurt_train_view(tpurt_arg_tensor(c, 4)),
      .out0 = tpurt_train_view(&c->outputs[0]),
      .out1 = tpurt_train_view(&c->outputs[1]),
      .ws = tpurt_train_view(lstm ? &c->outputs[2] : NULL),
      .h = h,
  };
  if (ctx) tpurt_parallel_for(ctx, b, h > 0 ? 1 + 4096 / (h * g) : b, lstm ? lstm_rows : gru_rows, &j);
  else (lstm ? lstm_rows : gru_rows)(&j, 0, b, 0);
  return TPURT_OK;
}

/* Sums grad_gates [B, N] over the batch into bias [N] (row by row, in order). */
static void sum_rows(tpurt_train_view_t gates, tpurt_train_view_t bias, int64_t b, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    double s = 0;
    for (int64_t r = 0; r < b; ++r) s += tpurt_train_ld(gates, r * n + k);
    tpurt_train_st(bias, k, s);
  }
}

typedef struct lstm_bwd_job_t {
  tpurt_train_view_t ghy, gcy, cx, cy, ws, ggates, gcx;
  int64_t h;
} lstm_bwd_job_t;

static void lstm_bwd_rows(void* user, int64_t begin, int64_t end, int tid) {
  const lstm_bwd_job_t* j = user;
  const int64_t h = j->h, gh = 4 * h;
  for (int64_t b = begin; b < end; ++b) {
    for (int64_t k = 0; k < h; ++k) {
      int64_t s = b * h + k, w = b * gh + k;
      double ig = tpurt_train_ld(j->ws, w), fg = tpurt_train_ld(j->ws, w + h);
      double cg = tpurt_train_ld(j->ws, w + 2 * h), og = tpurt_train_ld(j->ws, w + 3 * h);
      double go = j->ghy.t ? tpurt_train_ld(j->ghy, s) : 0.0;
      double gc = j->gcy.t ? tpurt_train_ld(j->gcy, s) : 0.0;
      double tcy = tanh(tpurt_train_ld(j->cy, s)), cx = tpurt_train_ld(j->cx, s);
      double gcx = go * og * (1 - tcy * tcy) + gc;
      tpurt_train_st(j->ggates, w, gcx * cg * ig * (1 - ig));
      tpurt_train_st(j->ggates, w + h, gcx * cx * fg * (1 - fg));
      tpurt_train_st(j->ggates, w + 2 * h, gcx * ig * (1 - cg * cg));
      tpurt_train_st(j->ggates, w + 3 * h, go * tcy * og * (1 - og));
      tpurt_train_st(j->gcx, s, gcx * fg);
    }
  }
}

/* _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace,
 * has_bias) -> (grad_gates, grad_cx, grad_bias) */
static tpurt_status_t lstm_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  const tpurt_tensor_t *cx = tpurt_arg_tensor(c, 2), *cy = tpurt_arg_tensor(c, 3), *ws = tpurt_arg_tensor(c, 4);
  int64_t b = 0, h = 0;
  tpurt_status_t st = check_cell(c, ws, ws, cx, 4, false, &b, &h);
  if (st) return st;
  if (!cy || !tpurt_tensor_same_shape(cx, cy) || c->num_outputs < 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: cy must match cx", c->name);
  lstm_bwd_job_t j = {
      .ghy = tpurt_train_view(tpurt_arg_tensor(c, 0)), .gcy = tpurt_train_view(tpurt_arg_tensor(c, 1)),
      .cx = tpurt_train_view(cx), .cy = tpurt_train_view(cy), .ws = tpurt_train_view(ws),
      .ggates = tpurt_train_view(&c->outputs[0]), .gcx = tpurt_train_view(&c->outputs[1]), .h = h,
  };
  /* neither gradient defined: ATen returns undefined tensors, which have no data to write */
  if ((!j.ghy.t && !j.gcy.t) || !c->outputs[0].data || !c->outputs[1].data) return TPURT_OK;
  if (ctx) tpurt_parallel_for(ctx, b, h > 0 ? 1 + 4096 / (h * 4) : b, lstm_bwd_rows, &j);
  else lstm_bwd_rows(&j, 0, b, 0);
  if (tpurt_arg_bool(c, 5, false) && c->num_outputs > 2 && c->outputs[2].data)
    sum_rows(j.ggates, tpurt_train_view(&c->outputs[2]), b, 4 * h);
  return TPURT_OK;
}

typedef struct gru_bwd_job_t {
  tpurt_train_view_t ghy, ws, gi, gh, ghx;
  int64_t h;
} gru_bwd_job_t;

static void gru_bwd_rows(void* user, int64_t begin, int64_t end, int tid) {
  const gru_bwd_job_t* j = user;
  const int64_t h = j->h;
  for (int64_t b = begin; b < end; ++b) {
    for (int64_t k = 0; k < h; ++k) {
      int64_t s = b * h + k, w = b * 5 * h + k, g = b * 3 * h + k;
      double rg = tpurt_train_ld(j->ws, w), zg = tpurt_train_ld(j->ws, w + h);
      double ng = tpurt_train_ld(j->ws, w + 2 * h), hx = tpurt_train_ld(j->ws, w + 3 * h);
      double hn = tpurt_train_ld(j->ws, w + 4 * h);
      double go = tpurt_train_ld(j->ghy, s);
      double gz = go * (hx - ng) * (1 - zg) * zg;
      double gin = go * (1 - zg) * (1 - ng * ng);
      double ghn = gin * rg;
      double gr = gin * hn * (1 - rg) * rg;
      tpurt_train_st(j->gi, g, gr);
      tpurt_train_st(j->gi, g + h, gz);
      tpurt_train_st(j->gi, g + 2 * h, gin);
      tpurt_train_st(j->gh, g, gr);
      tpurt_train_st(j->gh, g + h, gz);
      tpurt_train_st(j->gh, g + 2 * h, ghn);
      tpurt_train_st(j->ghx, s, go * zg);
    }
  }
}

/* _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) ->
 * (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias) */
static tpurt_status_t gru_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  const tpurt_tensor_t *ghy = tpurt_arg_tensor(c, 0), *ws = tpurt_arg_tensor(c, 1);
  if (!ghy || !ws || ghy->ndim != 2 || ws->ndim != 2 || ws->sizes[0] != ghy->sizes[0] ||
      ws->sizes[1] != 5 * ghy->sizes[1] || c->num_outputs < 3)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected grad_hy [B, H] and workspace [B, 5H]", c->name);
  int64_t b = ghy->sizes[0], h = ghy->sizes[1];
  gru_bwd_job_t j = {
      .ghy = tpurt_train_view(ghy), .ws = tpurt_train_view(ws), .gi = tpurt_train_view(&c->outputs[0]),
      .gh = tpurt_train_view(&c->outputs[1]), .ghx = tpurt_train_view(&c->outputs[2]), .h = h,
  };
  if (ctx) tpurt_parallel_for(ctx, b, h > 0 ? 1 + 4096 / (h * 3) : b, gru_bwd_rows, &j);
  else gru_bwd_rows(&j, 0, b, 0);
  if (tpurt_arg_bool(c, 2, false) && c->num_outputs > 4 && c->outputs[3].data && c->outputs[4].data) {
    sum_rows(j.gi, tpurt_train_view(&c->outputs[3]), b, 3 * h);
    sum_rows(j.gh, tpurt_train_view(&c->outputs[4]), b, 3 * h);
  }
  return TPURT_OK;
}

/* The reference twins run the same loops on one thread. */
tpurt_status_t tpurt_train_lstm_cell(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cell_forward(x, c, true); }
tpurt_status_t tpurt_train_lstm_cell_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cell_forward(NULL, c, true); }
tpurt_status_t tpurt_train_gru_cell(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cell_forward(x, c, false); }
tpurt_status_t tpurt_train_gru_cell_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cell_forward(NULL, c, false); }
tpurt_status_t tpurt_train_lstm_cell_backward(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return lstm_backward(x, c); }
tpurt_status_t tpurt_train_lstm_cell_backward_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return lstm_backward(NULL, c); }
tpurt_status_t tpurt_train_gru_cell_backward(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return gru_backward(x, c); }
tpurt_status_t tpurt_train_gru_cell_backward_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return gru_backward(NULL, c); }
