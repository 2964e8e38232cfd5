/* `redline quantize -m IN.gguf -o OUT.gguf -q TYPE`: requantizes a GGUF
 * model.  Every matrix (a tensor of two or more dimensions whose name ends
 * in "weight") is dequantized to f32 a few rows at a time and quantized to
 * TYPE with the reference quantizers of src/tensor; vectors (norms, biases)
 * and everything else are copied unchanged, as is all metadata except
 * general.file_type, which is set to the llama.cpp file type of TYPE.
 * A matrix whose rows are not a multiple of TYPE's block takes the nearest
 * type whose block fits (K-quants need rows of 256: q4_K -> q5_0, ...).
 * The file is written to OUT.tmp and renamed, so OUT is never half
 * written.  Best from an f16/bf16/f32 source: requantizing an already
 * quantized model adds the two rounding errors. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "gguf/gguf.h"

/* Target types: name, llama.cpp's general.file_type, and the type that
 * replaces it for rows that are not a multiple of its block. */
static const struct {
    rl_type t;
    uint32_t ftype;
    rl_type fallback;
} k_targets[] = {
    {RL_TYPE_F32, 0, RL_TYPE_F32},        {RL_TYPE_F16, 1, RL_TYPE_F16},
    {RL_TYPE_BF16, 32, RL_TYPE_BF16},     {RL_TYPE_Q8_0, 7, RL_TYPE_F16},
    {RL_TYPE_Q4_0, 2, RL_TYPE_Q8_0},      {RL_TYPE_Q4_1, 3, RL_TYPE_Q8_0},
    {RL_TYPE_Q5_0, 8, RL_TYPE_Q8_0},      {RL_TYPE_Q5_1, 9, RL_TYPE_Q8_0},
    {RL_TYPE_Q2_K, 10, RL_TYPE_Q4_0},     {RL_TYPE_Q3_K, 12, RL_TYPE_Q4_0},
    {RL_TYPE_Q4_K, 15, RL_TYPE_Q5_0},     {RL_TYPE_Q5_K, 17, RL_TYPE_Q5_1},
    {RL_TYPE_Q6_K, 18, RL_TYPE_Q8_0},     {RL_TYPE_MXFP4, 38, RL_TYPE_Q8_0},
    {RL_TYPE_IQ4_XS, 30, RL_TYPE_IQ4_NL},
};
#define N_TARGETS (sizeof k_targets / sizeof k_targets[0])

static int target_index(rl_type t) {
    for (size_t i = 0; i < N_TARGETS; i++)
        if (k_targets[i].t == t) return (int)i;
    return -1;
}

static void usage(FILE *f) {
    fprintf(f, "usage: redline quantize -m IN.gguf -o OUT.gguf -q TYPE [options]\n"
               "  -m, --model PATH       the model to requantize\n"
               "  -o, --output PATH      the file to write (written to PATH.tmp, then renamed)\n"
               "  -q, --type TYPE        f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,\n"
               "                         q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs, mxfp4\n"
               "      --output-type TYPE the type of output.weight (default: TYPE)\n"
               "  -t, --threads N        quantizing threads (default 2)\n");
}

/* The type a matrix of row length ne0 gets for target t. */
static rl_type pick_type(rl_type t, int64_t ne0) {
    for (int hops = 0; hops < 4; hops++) {
        if (ne0 % rl_type_get(t)->blck_size == 0) return t;
        t = k_targets[target_index(t)].fallback;
    }
    return RL_TYPE_F16;
}

static bool is_matrix(const rl_gguf_tensor *t) {
    size_t n = strlen(t->name);
    return t->n_dims >= 2 && n >= 6 && !strcmp(t->name + n - 6, "weight");
}

/* ---- metadata ---- */

static rl_status copy_array(const rl_gguf *g, int64_t i, const char *key, rl_gguf_writer *w,
                            rl_err *err) {
    rl_gguf_vtype et;
    uint64_t n;
    rl_status s = rl_gguf_kv_arr(g, i, &et, &n, err);
    if (s) return s;
    if (et == RL_GGUF_ARRAY)
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          "quantize: key '%s': nested arrays are not copied", key);
    if (et == RL_GGUF_STRING) {
        const char **p = rl_malloc(sizeof(char *) * (n ? n : 1));
        size_t *l = rl_malloc(sizeof(size_t) * (n ? n : 1));
        if (!p || !l) s = rl_err_set(err, RL_ERR_NOMEM, "quantize: out of memory");
        for (uint64_t j = 0; !s && j < n; j++) {
            rl_gguf_str v;
            if (!(s = rl_gguf_arr_str(g, i, j, &v, err))) {
                p[j] = v.ptr ? v.ptr : "";
                l[j] = (size_t)v.len;
            }
        }
        if (!s && (s = rl_gguf_writer_arr_str(w, key, p, l, n)))
            rl_err_set(err, s, "quantize: cannot write key '%s'", key);
        rl_free(p);
        rl_free(l);
        return s;
    }
    static const uint8_t esize[RL_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    size_t bytes;
    if ((unsigned)et >= RL_GGUF_VTYPE_COUNT || !esize[et] ||
        !rl_mul_size((size_t)n, esize[et], &bytes))
        return rl_err_set(err, RL_ERR_FORMAT, "quantize: key '%s': bad array", key);
    uint8_t *buf = rl_malloc(bytes ? bytes : 1);
    if (!buf) return rl_err_set(err, RL_ERR_NOMEM, "quantize: out of memory");
    for (uint64_t j = 0; !s && j < n; j++) {
        uint8_t *d = buf + j * esize[et];
        if (et == RL_GGUF_FLOAT32 || et == RL_GGUF_FLOAT64) {
            double v;
            if (!(s = rl_gguf_arr_f64(g, i, j, &v, err))) {
                float f = (float)v;
                if (et == RL_GGUF_FLOAT32)
                    memcpy(d, &f, 4);
                else
                    memcpy(d, &v, 8);
            }
        } else {
            int64_t v;
            if (!(s = rl_gguf_arr_i64(g, i, j, &v, err)))
                memcpy(d, &v, esize[et]); /* little-endian */
        }
    }
    if (!s && (s = rl_gguf_writer_arr(w, key, et, buf, n)))
        rl_err_set(err, s, "quantize: cannot write key '%s'", key);
    rl_free(buf);
    return s;
}

static rl_status copy_kv(const rl_gguf *g, int64_t i, rl_gguf_writer *w, rl_err *err) {
    const char *key = rl_gguf_kv_key(g, i);
    rl_gguf_vtype t = rl_gguf_kv_type(g, i);
    rl_status s = RL_OK;
    int64_t iv = 0;
    double fv = 0;
    bool bv = false;
    rl_gguf_str sv;
    switch (t) {
    case RL_GGUF_STRING:
        if (!(s = rl_gguf_kv_str(g, i, &sv, err)))
            s = rl_gguf_writer_str(w, key, sv.ptr ? sv.ptr : "", (size_t)sv.len);
        break;
    case RL_GGUF_ARRAY:
        return copy_array(g, i, key, w, err);
    case RL_GGUF_BOOL:
        if (!(s = rl_gguf_kv_bool(g, i, &bv, err))) s = rl_gguf_writer_bool(w, key, bv);
        break;
    case RL_GGUF_FLOAT32:
    case RL_GGUF_FLOAT64:
        if (!(s = rl_gguf_kv_f64(g, i, &fv, err)))
            s = t == RL_GGUF_FLOAT32 ? rl_gguf_writer_f32(w, key, (float)fv)
                                     : rl_gguf_writer_f64(w, key, fv);
        break;
    default:
        if ((s = rl_gguf_kv_i64(g, i, &iv, err))) break;
        switch (t) {
        case RL_GGUF_UINT8:
            s = rl_gguf_writer_u8(w, key, (uint8_t)iv);
            break;
        case RL_GGUF_INT8:
            s = rl_gguf_writer_i8(w, key, (int8_t)iv);
            break;
        case RL_GGUF_UINT16:
            s = rl_gguf_writer_u16(w, key, (uint16_t)iv);
            break;
        case RL_GGUF_INT16:
            s = rl_gguf_writer_i16(w, key, (int16_t)iv);
            break;
        case RL_GGUF_UINT32:
            s = rl_gguf_writer_u32(w, key, (uint32_t)iv);
            break;
        case RL_GGUF_INT32:
            s = rl_gguf_writer_i32(w, key, (int32_t)iv);
            break;
        case RL_GGUF_UINT64:
            s = rl_gguf_writer_u64(w, key, (uint64_t)iv);
            break;
        case RL_GGUF_INT64:
            s = rl_gguf_writer_i64(w, key, iv);
            break;
        default:
            return rl_err_set(err, RL_ERR_FORMAT, "quantize: key '%s': unknown value type %d", key,
                              (int)t);
        }
    }
    if (s && !err->code) rl_err_set(err, s, "quantize: cannot copy key '%s'", key);
    return s;
}

/* ---- tensors ---- */

#define ROWS_PER_JOB 16

typedef struct qjob {
    const rl_gguf_tensor *t;
    rl_type to;
    uint8_t *dst;
    int64_t n_rows;
    size_t src_row, dst_row;
    float *tmp; /* [nth][ROWS_PER_JOB * ne0] */
} qjob;

static void quant_task(void *p, int ith, int nth) {
    qjob *q = p;
    const rl_type_traits *from = rl_type_get(q->t->type), *to = rl_type_get(q->to);
    const int64_t ne0 = q->t->ne[0];
    float *tmp = q->tmp + (size_t)ith * ROWS_PER_JOB * (size_t)ne0;
    for (int64_t r0 = (int64_t)ith * ROWS_PER_JOB; r0 < q->n_rows;
         r0 += (int64_t)nth * ROWS_PER_JOB) {
        int64_t nr = q->n_rows - r0 < ROWS_PER_JOB ? q->n_rows - r0 : ROWS_PER_JOB;
        from->to_float((const uint8_t *)q->t->data + (size_t)r0 * q->src_row, tmp, nr * ne0);
        to->from_float(tmp, q->dst + (size_t)r0 * q->dst_row, nr * ne0);
    }
}

/* Requantizes matrix t to type `to` into a new buffer (*out, rl_free). */
static rl_status requant(const rl_gguf_tensor *t, rl_type to, rl_threadpool *tp, void **out,
                         rl_err *err) {
    qjob q = {.t = t, .to = to, .n_rows = t->n_elements / t->ne[0]};
    q.src_row = rl_type_row_size(t->type, t->ne[0]);
    q.dst_row = rl_type_row_size(to, t->ne[0]);
    size_t bytes, tmpn;
    int nth = rl_threadpool_n_threads(tp);
    if (!q.src_row || !q.dst_row || !rl_mul_size((size_t)q.n_rows, q.dst_row, &bytes) ||
        !rl_mul_size((size_t)nth * ROWS_PER_JOB, (size_t)t->ne[0], &tmpn) ||
        !rl_mul_size(tmpn, sizeof(float), &tmpn))
        return rl_err_set(err, RL_ERR_FORMAT, "quantize: tensor '%s': bad shape", t->name);
    q.dst = rl_malloc(bytes ? bytes : 1);
    q.tmp = rl_malloc(tmpn);
    if (!q.dst || !q.tmp) {
        rl_free(q.dst);
        rl_free(q.tmp);
        return rl_err_set(err, RL_ERR_NOMEM, "quantize: out of memory for tensor '%s'", t->name);
    }
    rl_threadpool_run(tp, quant_task, &q);
    rl_free(q.tmp);
    *out = q.dst;
    return RL_OK;
}

typedef struct qstats {
    int n_quant, n_fallback, n_copied;
    size_t bytes_in, bytes_out;
} qstats;

static rl_status quantize_file(const char *in, const char *out, rl_type type, rl_type out_type,
                               int threads, qstats *st, rl_err *err) {
    rl_gguf *g = NULL;
    rl_gguf_writer *w = NULL;
    rl_threadpool *tp = NULL;
    void **bufs = NULL;
    int64_t nt = 0;
    rl_status s = rl_gguf_open(in, &g, err);
    if (s) return s;
    nt = rl_gguf_n_tensors(g);
    w = rl_gguf_writer_new();
    tp = rl_threadpool_new(threads);
    bufs = rl_calloc((size_t)(nt ? nt : 1), sizeof *bufs);
    if (!w || !tp || !bufs) {
        s = rl_err_set(err, RL_ERR_NOMEM, "quantize: out of memory");
        goto done;
    }
    if (rl_gguf_alignment(g) != RL_GGUF_DEFAULT_ALIGNMENT)
        rl_gguf_writer_set_alignment(w, (uint32_t)rl_gguf_alignment(g));
    for (int64_t i = 0; i < rl_gguf_n_kv(g) && !s; i++) {
        const char *key = rl_gguf_kv_key(g, i);
        if (!strcmp(key, "general.file_type") || !strcmp(key, "general.alignment")) continue;
        s = copy_kv(g, i, w, err);
    }
    if (!s && (s = rl_gguf_writer_u32(w, "general.file_type", k_targets[target_index(type)].ftype)))
        rl_err_set(err, s, "quantize: cannot write general.file_type");
    for (int64_t i = 0; i < nt && !s; i++) {
        const rl_gguf_tensor *t = rl_gguf_tensor_at(g, i);
        const void *data = t->data;
        rl_type ty = t->type;
        st->bytes_in += t->nbytes;
        if (is_matrix(t)) {
            rl_type want = !strcmp(t->name, "output.weight") ? out_type : type;
            ty = pick_type(want, t->ne[0]);
            if (!rl_type_get(t->type)->to_float)
                s = rl_err_set(err, RL_ERR_UNSUPPORTED,
                               "quantize: tensor '%s': cannot read type %s", t->name,
                               rl_type_name(t->type));
            else if (ty != t->type && !(s = requant(t, ty, tp, &bufs[i], err)))
                data = bufs[i];
            if (ty != want) st->n_fallback++;
            st->n_quant++;
        } else {
            st->n_copied++;
        }
        if (s) break;
        st->bytes_out += rl_type_row_size(ty, t->ne[0]) * (size_t)(t->n_elements / t->ne[0]);
        if ((s = rl_gguf_writer_tensor(w, t->name, ty, t->n_dims, t->ne, data)))
            rl_err_set(err, s, "quantize: cannot add tensor '%s'", t->name);
    }
    if (!s) {
        size_t n = strlen(out);
        char *tmp = rl_malloc(n + 5);
        if (!tmp)
            s = rl_err_set(err, RL_ERR_NOMEM, "quantize: out of memory");
        else {
            memcpy(tmp, out, n);
            memcpy(tmp + n, ".tmp", 5);
            s = rl_gguf_writer_to_file(w, tmp, err);
            if (!s && rename(tmp, out) != 0)
                s = rl_err_set(err, RL_ERR_IO, "quantize: cannot rename %s to %s", tmp, out);
            if (s) remove(tmp);
            rl_free(tmp);
        }
    }
done:
    for (int64_t i = 0; bufs && i < nt; i++) rl_free(bufs[i]);
    rl_free(bufs);
    rl_threadpool_free(tp);
    rl_gguf_writer_free(w);
    rl_gguf_close(g);
    return s;
}

static bool parse_target(const char *v, rl_type *t) {
    return rl_type_from_name(v, t) && target_index(*t) >= 0;
}

int rl_cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type_s = NULL, *out_type_s = NULL;
    int32_t threads = 2;
    rl_args A;
    rl_args_init(&A, "redline quantize", argc, argv);
    while (rl_args_next(&A)) {
        bool ok = true;
        if (rl_args_is(&A, "-h|--help")) {
            usage(stdout);
            return 0;
        } else if (rl_args_is(&A, "-m|--model"))
            ok = rl_args_str(&A, &in);
        else if (rl_args_is(&A, "-o|--output"))
            ok = rl_args_str(&A, &out);
        else if (rl_args_is(&A, "-q|--type"))
            ok = rl_args_str(&A, &type_s);
        else if (rl_args_is(&A, "--output-type"))
            ok = rl_args_str(&A, &out_type_s);
        else if (rl_args_is(&A, "-t|--threads"))
            ok = rl_args_i32(&A, 1, 256, &threads);
        else
            ok = rl_args_unknown(&A);
        if (!ok) return 2;
    }
    rl_type type, out_type;
    if (!in || !out || !type_s) {
        fprintf(stderr, "redline quantize: -m, -o and -q are required (see --help)\n");
        return 2;
    }
    if (!parse_target(type_s, &type) || (out_type_s && !parse_target(out_type_s, &out_type))) {
        fprintf(stderr,
                "redline quantize: bad type '%s' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                "q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs, mxfp4)\n",
                out_type_s && parse_target(type_s, &type) ? out_type_s : type_s);
        return 2;
    }
    if (!out_type_s) out_type = type;
    qstats st = {0};
    rl_err err;
    rl_err_clear(&err);
    if (quantize_file(in, out, type, out_type, threads, &st, &err)) {
        fprintf(stderr, "redline quantize: %s\n", err.msg);
        return 1;
    }
    printf("%s -> %s (%s): %d matrices requantized (%d with a fallback type: rows not a multiple "
           "of the "
           "block), %d tensors copied; tensor data %.1f MiB -> %.1f MiB\n",
           in, out, rl_type_name(type), st.n_quant, st.n_fallback, st.n_copied,
           (double)st.bytes_in / 1048576.0, (double)st.bytes_out / 1048576.0);
    return 0;
}
