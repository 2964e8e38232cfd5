/* Paged KV block pool, prefix cache and sequence block tables (see kv.h
 * for the states and invariants).
 *
 * Free blocks live on two intrusive doubly-linked lists threaded through
 * prev/next arrays: `plain` (no hash, handed out first) and `cached` (full
 * blocks with a registered hash, in LRU order: head = least recently
 * freed, evicted first).  The hash index is a chained table whose chains
 * are threaded through hnext[], so insert and delete never allocate. */
#include "kv/kv.h"

#include <nettle/sha2.h>
#include <string.h>

#include "base/buf.h"

enum { LIST_NONE = 0, LIST_PLAIN = 1, LIST_CACHED = 2 };

typedef struct blist {
    int32_t head, tail, n;
} blist;

struct rl_kv_pool {
    rl_kv_config cfg;
    int32_t n_blocks;     /* including the null block 0 */
    rl_kv_layer *layers;  /* [n_layer] */
    uint8_t *storage;     /* all K and V regions */
    int32_t *refcnt;      /* [n_blocks] */
    int32_t *prev, *next; /* list links */
    uint8_t *list;        /* LIST_* */
    uint8_t *has_hash;
    uint8_t (*hash)[RL_KV_HASH_BYTES];
    int32_t *hnext;    /* hash chain link */
    int32_t *bucket;   /* [n_bucket] chain heads, -1 empty */
    uint32_t n_bucket; /* power of two */
    blist plain, cached;
    int32_t n_used;
    uint64_t n_evictions, prefix_queries, prefix_hits;
    rl_kv_observer_fn observer; /* may be NULL (rl_kv_pool_set_observer) */
    void *observer_ud;
};

#define OBSERVE(p, op, a, b)                                                                       \
    do {                                                                                           \
        if ((p)->observer) (p)->observer((p)->observer_ud, (op), (a), (b));                        \
    } while (0)

/* ---- lists ---- */
static blist *list_of(rl_kv_pool *p, int which) {
    return which == LIST_PLAIN ? &p->plain : &p->cached;
}

static void list_push_tail(rl_kv_pool *p, int which, int32_t id) {
    blist *l = list_of(p, which);
    p->prev[id] = l->tail;
    p->next[id] = -1;
    if (l->tail >= 0)
        p->next[l->tail] = id;
    else
        l->head = id;
    l->tail = id;
    l->n++;
    p->list[id] = (uint8_t)which;
}

static void list_remove(rl_kv_pool *p, int32_t id) {
    blist *l = list_of(p, p->list[id]);
    if (p->prev[id] >= 0)
        p->next[p->prev[id]] = p->next[id];
    else
        l->head = p->next[id];
    if (p->next[id] >= 0)
        p->prev[p->next[id]] = p->prev[id];
    else
        l->tail = p->prev[id];
    l->n--;
    p->list[id] = LIST_NONE;
    p->prev[id] = p->next[id] = -1;
}

/* ---- hash index ---- */
static uint32_t bucket_of(const rl_kv_pool *p, const uint8_t *h) {
    uint32_t v;
    memcpy(&v, h, 4);
    return v & (p->n_bucket - 1);
}

static int32_t index_find(const rl_kv_pool *p, const uint8_t *h) {
    for (int32_t id = p->bucket[bucket_of(p, h)]; id >= 0; id = p->hnext[id])
        if (!memcmp(p->hash[id], h, RL_KV_HASH_BYTES)) return id;
    return -1;
}

static void index_insert(rl_kv_pool *p, int32_t id, const uint8_t *h) {
    memcpy(p->hash[id], h, RL_KV_HASH_BYTES);
    uint32_t b = bucket_of(p, h);
    p->hnext[id] = p->bucket[b];
    p->bucket[b] = id;
    p->has_hash[id] = 1;
}

static void index_remove(rl_kv_pool *p, int32_t id) {
    int32_t *link = &p->bucket[bucket_of(p, p->hash[id])];
    while (*link != id) {
        RL_ASSERT(*link >= 0);
        link = &p->hnext[*link];
    }
    *link = p->hnext[id];
    p->hnext[id] = -1;
    p->has_hash[id] = 0;
}

/* ---- pool ---- */
static size_t layer_k_block_bytes(const rl_kv_config *c) {
    return (size_t)c->n_kv_head * (size_t)c->block_size * rl_type_row_size(c->k_type, c->head_dim);
}
static size_t layer_v_block_bytes(const rl_kv_config *c) {
    return (size_t)c->n_kv_head * (size_t)c->block_size * rl_type_row_size(c->v_type, c->head_dim);
}

size_t rl_kv_block_bytes(const rl_kv_config *c) {
    return (size_t)c->n_layer * (layer_k_block_bytes(c) + layer_v_block_bytes(c));
}

rl_status rl_kv_pool_new(const rl_kv_config *cfg, rl_kv_pool **out, rl_err *err) {
    *out = NULL;
    if (cfg->n_layer <= 0 || cfg->n_kv_head <= 0 || cfg->head_dim <= 0 || cfg->block_size <= 0 ||
        cfg->block_size > 4096)
        return rl_err_set(err, RL_ERR_INVALID,
                          "kv: bad shape (n_layer %d, n_kv_head %d, head_dim %d, block_size %d)",
                          cfg->n_layer, cfg->n_kv_head, cfg->head_dim, cfg->block_size);
    if (!rl_type_row_size(cfg->k_type, cfg->head_dim) ||
        !rl_type_row_size(cfg->v_type, cfg->head_dim))
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          "kv: cache types %s/%s cannot hold rows of head_dim %d",
                          rl_type_name(cfg->k_type), rl_type_name(cfg->v_type), cfg->head_dim);
    size_t bb = rl_kv_block_bytes(cfg);
    int64_t nb = cfg->n_blocks > 0 ? cfg->n_blocks : (int64_t)(cfg->mem_bytes / bb);
    if (nb < 2)
        return rl_err_set(err, RL_ERR_LIMIT,
                          "kv: memory budget of %zu bytes holds fewer than 2 blocks of %zu bytes",
                          cfg->mem_bytes, bb);
    if (nb > INT32_MAX / 2) nb = INT32_MAX / 2;
    rl_kv_pool *p = rl_calloc(1, sizeof *p);
    if (!p) return rl_err_set(err, RL_ERR_NOMEM, "kv: out of memory");
    p->cfg = *cfg;
    p->n_blocks = (int32_t)nb;
    size_t n = (size_t)nb, total;
    p->n_bucket = 16;
    while (p->n_bucket < n) p->n_bucket <<= 1;
    p->layers = rl_calloc((size_t)cfg->n_layer, sizeof *p->layers);
    p->refcnt = rl_calloc(n, sizeof *p->refcnt);
    p->prev = rl_calloc(n, sizeof *p->prev);
    p->next = rl_calloc(n, sizeof *p->next);
    p->list = rl_calloc(n, 1);
    p->has_hash = rl_calloc(n, 1);
    p->hash = rl_calloc(n, RL_KV_HASH_BYTES);
    p->hnext = rl_calloc(n, sizeof *p->hnext);
    p->bucket = rl_calloc(p->n_bucket, sizeof *p->bucket);
    if (!rl_mul_size(bb, n, &total) || !p->layers || !p->refcnt || !p->prev || !p->next ||
        !p->list || !p->has_hash || !p->hash || !p->hnext || !p->bucket ||
        !(p->storage = rl_calloc(total, 1))) {
        rl_kv_pool_free(p);
        return rl_err_set(err, RL_ERR_NOMEM, "kv: cannot allocate %lld blocks of %zu bytes",
                          (long long)nb, bb);
    }
    size_t kb = layer_k_block_bytes(cfg), vb = layer_v_block_bytes(cfg);
    uint8_t *at = p->storage;
    for (int32_t l = 0; l < cfg->n_layer; l++) {
        rl_kv_layer *L = &p->layers[l];
        L->k_type = cfg->k_type;
        L->v_type = cfg->v_type;
        L->k_rot = cfg->k_rot;
        L->v_rot = cfg->v_rot;
        L->n_kv_head = cfg->n_kv_head;
        L->head_dim = cfg->head_dim;
        L->block_size = cfg->block_size;
        L->k_block_bytes = kb;
        L->v_block_bytes = vb;
        L->k_base = at;
        at += kb * n;
        L->v_base = at;
        at += vb * n;
    }
    for (uint32_t b = 0; b < p->n_bucket; b++) p->bucket[b] = -1;
    p->plain.head = p->plain.tail = p->cached.head = p->cached.tail = -1;
    for (int32_t id = 0; id < p->n_blocks; id++) {
        p->hnext[id] = p->prev[id] = p->next[id] = -1;
        if (id > 0) list_push_tail(p, LIST_PLAIN, id);
    }
    p->refcnt[0] = 1; /* the null block is permanently "in use" */
    *out = p;
    return RL_OK;
}

void rl_kv_pool_free(rl_kv_pool *p) {
    if (!p) return;
    rl_free(p->layers);
    rl_free(p->storage);
    rl_free(p->refcnt);
    rl_free(p->prev);
    rl_free(p->next);
    rl_free(p->list);
    rl_free(p->has_hash);
    rl_free(p->hash);
    rl_free(p->hnext);
    rl_free(p->bucket);
    rl_free(p);
}

rl_kv_layer *rl_kv_pool_layers(rl_kv_pool *p) {
    return p->layers;
}
const rl_kv_config *rl_kv_pool_config(const rl_kv_pool *p) {
    return &p->cfg;
}
int32_t rl_kv_pool_available(const rl_kv_pool *p) {
    return p->plain.n + p->cached.n;
}

rl_kv_stats rl_kv_pool_stats(const rl_kv_pool *p) {
    rl_kv_stats s = {
        .n_blocks = p->n_blocks - 1,
        .n_used = p->n_used,
        .n_cached = p->cached.n,
        .n_free = p->plain.n,
        .n_evictions = p->n_evictions,
        .prefix_queries = p->prefix_queries,
        .prefix_hits = p->prefix_hits,
    };
    return s;
}

void rl_kv_pool_clear_cache(rl_kv_pool *p) {
    while (p->cached.head >= 0) {
        int32_t id = p->cached.head;
        list_remove(p, id);
        index_remove(p, id);
        list_push_tail(p, LIST_PLAIN, id);
    }
}

bool rl_kv_pool_check(const rl_kv_pool *p, rl_err *err) {
    int32_t n_plain = 0, n_cached = 0, n_used = 0;
    if (p->refcnt[0] != 1 || p->list[0] != LIST_NONE) {
        rl_err_set(err, RL_ERR_INVALID, "kv check: null block disturbed");
        return false;
    }
    for (int which = LIST_PLAIN; which <= LIST_CACHED; which++) {
        const blist *l = which == LIST_PLAIN ? &p->plain : &p->cached;
        int32_t prev = -1, cnt = 0;
        for (int32_t id = l->head; id >= 0; id = p->next[id]) {
            if (id <= 0 || id >= p->n_blocks || p->list[id] != which || p->prev[id] != prev ||
                p->refcnt[id] != 0 || (which == LIST_CACHED) != (p->has_hash[id] != 0) ||
                ++cnt > p->n_blocks) {
                rl_err_set(err, RL_ERR_INVALID, "kv check: list %d broken at block %d", which, id);
                return false;
            }
            prev = id;
        }
        if (prev != l->tail || cnt != l->n) {
            rl_err_set(err, RL_ERR_INVALID, "kv check: list %d count/tail mismatch", which);
            return false;
        }
    }
    for (int32_t id = 1; id < p->n_blocks; id++) {
        if (p->refcnt[id] < 0) {
            rl_err_set(err, RL_ERR_INVALID, "kv check: block %d refcount %d", id, p->refcnt[id]);
            return false;
        }
        if (p->refcnt[id] > 0) {
            n_used++;
            if (p->list[id] != LIST_NONE) {
                rl_err_set(err, RL_ERR_INVALID, "kv check: used block %d on a free list", id);
                return false;
            }
        } else if (p->list[id] == LIST_PLAIN)
            n_plain++;
        else if (p->list[id] == LIST_CACHED)
            n_cached++;
        else {
            rl_err_set(err, RL_ERR_INVALID, "kv check: block %d lost (refcount 0, on no list)", id);
            return false;
        }
        if (p->has_hash[id] && index_find(p, p->hash[id]) != id) {
            rl_err_set(err, RL_ERR_INVALID, "kv check: block %d hash not indexed", id);
            return false;
        }
    }
    if (n_used != p->n_used || n_plain != p->plain.n || n_cached != p->cached.n ||
        n_used + n_plain + n_cached != p->n_blocks - 1) {
        rl_err_set(err, RL_ERR_INVALID, "kv check: counts used %d/%d plain %d cached %d of %d",
                   n_used, p->n_used, n_plain, n_cached, p->n_blocks - 1);
        return false;
    }
    return true;
}

/* ---- blocks ---- */
int32_t rl_kv_block_alloc(rl_kv_pool *p) {
    int32_t id = p->plain.head;
    if (id < 0) {
        id = p->cached.head; /* evict the least recently used cached block */
        if (id < 0) return -1;
        index_remove(p, id);
        p->n_evictions++;
    }
    list_remove(p, id);
    p->refcnt[id] = 1;
    p->n_used++;
    OBSERVE(p, RL_KV_OP_ALLOC, id, 0);
    return id;
}

void rl_kv_block_ref(rl_kv_pool *p, int32_t id) {
    RL_ASSERT(id > 0 && id < p->n_blocks);
    if (p->refcnt[id] == 0) {
        list_remove(p, id); /* revive a cached block */
        p->n_used++;
    }
    p->refcnt[id]++;
    OBSERVE(p, RL_KV_OP_REF, id, 0);
}

void rl_kv_block_unref(rl_kv_pool *p, int32_t id) {
    RL_ASSERT(id > 0 && id < p->n_blocks && p->refcnt[id] > 0);
    OBSERVE(p, RL_KV_OP_UNREF, id, 0);
    if (--p->refcnt[id] == 0) {
        p->n_used--;
        list_push_tail(p, p->has_hash[id] ? LIST_CACHED : LIST_PLAIN, id);
    }
}

int32_t rl_kv_block_refcount(const rl_kv_pool *p, int32_t id) {
    return id >= 0 && id < p->n_blocks ? p->refcnt[id] : -1;
}

void rl_kv_pool_set_observer(rl_kv_pool *p, rl_kv_observer_fn fn, void *ud) {
    p->observer = fn;
    p->observer_ud = ud;
}

void rl_kv_block_copy(rl_kv_pool *p, int32_t dst, int32_t src) {
    OBSERVE(p, RL_KV_OP_COPY, dst, src);
    for (int32_t l = 0; l < p->cfg.n_layer; l++) {
        rl_kv_layer *L = &p->layers[l];
        memcpy((uint8_t *)L->k_base + (size_t)dst * L->k_block_bytes,
               (uint8_t *)L->k_base + (size_t)src * L->k_block_bytes, L->k_block_bytes);
        memcpy((uint8_t *)L->v_base + (size_t)dst * L->v_block_bytes,
               (uint8_t *)L->v_base + (size_t)src * L->v_block_bytes, L->v_block_bytes);
    }
}

void rl_kv_hash_block(const uint8_t *parent, uint64_t salt, const int32_t *tokens, int32_t n,
                      uint8_t out[RL_KV_HASH_BYTES]) {
    struct sha256_ctx c;
    static const uint8_t root[RL_KV_HASH_BYTES] = {0};
    sha256_init(&c);
    sha256_update(&c, RL_KV_HASH_BYTES, parent ? parent : root);
    uint8_t sb[8];
    for (int i = 0; i < 8; i++) sb[i] = (uint8_t)(salt >> (8 * i));
    sha256_update(&c, 8, sb);
    for (int32_t i = 0; i < n; i++) {
        uint8_t tb[4];
        uint32_t t = (uint32_t)tokens[i];
        for (int k = 0; k < 4; k++) tb[k] = (uint8_t)(t >> (8 * k));
        sha256_update(&c, 4, tb);
    }
    sha256_digest(&c, RL_KV_HASH_BYTES, out);
}

/* ---- sequences ---- */
void rl_kv_seq_init(rl_kv_seq *s, uint64_t salt) {
    memset(s, 0, sizeof *s);
    s->salt = salt;
}

void rl_kv_seq_free(rl_kv_pool *p, rl_kv_seq *s) {
    /* Release from the end so the sequence's later blocks come first in
     * LRU order: they are the least likely to be shared by a later prefix. */
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) rl_kv_block_unref(p, s->blocks[i]);
    rl_free(s->blocks);
    rl_free(s->hashes);
    uint64_t salt = s->salt;
    rl_kv_seq_init(s, salt);
}

static bool seq_grow(rl_kv_seq *s, int32_t cap) {
    int32_t bcap = s->cap; /* blocks and hashes share s->cap */
    return !rl_grow_i32((void **)&s->blocks, &bcap, cap, sizeof *s->blocks) &&
           !rl_grow_i32((void **)&s->hashes, &s->cap, cap, RL_KV_HASH_BYTES);
}

int32_t rl_kv_seq_match_prefix(rl_kv_pool *p, rl_kv_seq *s, const int32_t *tokens, int32_t n,
                               int32_t max_tokens) {
    RL_ASSERT(s->n_blocks == 0);
    const int32_t bs = p->cfg.block_size;
    if (max_tokens > n) max_tokens = n;
    int32_t n_full = max_tokens / bs;
    if (n_full <= 0 || !seq_grow(s, n_full)) return 0;
    int32_t i = 0;
    for (; i < n_full; i++) {
        uint8_t h[RL_KV_HASH_BYTES];
        rl_kv_hash_block(i ? s->hashes[i - 1] : NULL, s->salt, tokens + (size_t)i * bs, bs, h);
        p->prefix_queries++;
        int32_t id = index_find(p, h);
        if (id < 0) break;
        p->prefix_hits++;
        rl_kv_block_ref(p, id);
        s->blocks[i] = id;
        memcpy(s->hashes[i], h, RL_KV_HASH_BYTES);
    }
    /* the blocks after the first miss were queried too: count them so the
     * hit rate reflects the whole prompt */
    p->prefix_queries += (uint64_t)(n_full - (i < n_full ? i + 1 : i));
    s->n_blocks = s->n_hashed = i;
    s->n_tokens = i * bs;
    return s->n_tokens;
}

/* True if block index bi of s exists and may not be written in place. */
static bool needs_cow(const rl_kv_pool *p, const rl_kv_seq *s, int32_t bi) {
    if (bi >= s->n_blocks) return false;
    int32_t id = s->blocks[bi];
    return p->refcnt[id] > 1 || p->has_hash[id];
}

int32_t rl_kv_seq_blocks_needed(const rl_kv_pool *p, const rl_kv_seq *s, int32_t n_total) {
    const int32_t bs = p->cfg.block_size;
    int32_t want = (n_total + bs - 1) / bs;
    int32_t need = want > s->n_blocks ? want - s->n_blocks : 0;
    if (n_total > s->n_tokens && needs_cow(p, s, s->n_tokens / bs)) need++;
    return need;
}

rl_status rl_kv_seq_reserve(rl_kv_pool *p, rl_kv_seq *s, int32_t n_total) {
    const int32_t bs = p->cfg.block_size;
    if (n_total <= s->n_tokens && n_total <= s->n_blocks * bs) return RL_OK;
    int32_t need = rl_kv_seq_blocks_needed(p, s, n_total);
    if (need > rl_kv_pool_available(p)) return RL_ERR_LIMIT;
    int32_t want = (n_total + bs - 1) / bs;
    if (!seq_grow(s, want)) return RL_ERR_NOMEM;
    int32_t bi = s->n_tokens / bs;
    if (n_total > s->n_tokens && needs_cow(p, s, bi)) {
        int32_t fresh = rl_kv_block_alloc(p);
        RL_ASSERT(fresh > 0);
        rl_kv_block_copy(p, fresh, s->blocks[bi]);
        rl_kv_block_unref(p, s->blocks[bi]);
        s->blocks[bi] = fresh;
        if (s->n_hashed > bi) s->n_hashed = bi; /* the copy will diverge */
    }
    while (s->n_blocks < want) {
        int32_t id = rl_kv_block_alloc(p);
        RL_ASSERT(id > 0);
        s->blocks[s->n_blocks++] = id;
    }
    return RL_OK;
}

void rl_kv_seq_commit(rl_kv_pool *p, rl_kv_seq *s, const int32_t *tokens, int32_t n_tokens) {
    const int32_t bs = p->cfg.block_size;
    RL_ASSERT(n_tokens <= s->n_blocks * bs);
    s->n_tokens = n_tokens;
    while ((s->n_hashed + 1) * bs <= n_tokens) {
        int32_t i = s->n_hashed;
        rl_kv_hash_block(i ? s->hashes[i - 1] : NULL, s->salt, tokens + (size_t)i * bs, bs,
                         s->hashes[i]);
        int32_t id = s->blocks[i];
        /* register unless an identical block is cached already (two
         * requests computed the same prefix at once: keep the first) */
        if (!p->has_hash[id] && index_find(p, s->hashes[i]) < 0) index_insert(p, id, s->hashes[i]);
        s->n_hashed++;
    }
}

void rl_kv_seq_truncate(rl_kv_pool *p, rl_kv_seq *s, int32_t n_tokens) {
    const int32_t bs = p->cfg.block_size;
    if (n_tokens >= s->n_tokens) return;
    s->n_tokens = n_tokens;
    int32_t keep = (n_tokens + bs - 1) / bs;
    while (s->n_blocks > keep) rl_kv_block_unref(p, s->blocks[--s->n_blocks]);
    if (s->n_hashed > n_tokens / bs) s->n_hashed = n_tokens / bs;
}

rl_status rl_kv_seq_fork(rl_kv_pool *p, rl_kv_seq *dst, const rl_kv_seq *src) {
    RL_ASSERT(dst->n_blocks == 0);
    if (!seq_grow(dst, src->n_blocks)) return RL_ERR_NOMEM;
    for (int32_t i = 0; i < src->n_blocks; i++) {
        rl_kv_block_ref(p, src->blocks[i]);
        dst->blocks[i] = src->blocks[i];
    }
    if (src->n_hashed) memcpy(dst->hashes, src->hashes, (size_t)src->n_hashed * RL_KV_HASH_BYTES);
    dst->n_blocks = src->n_blocks;
    dst->n_tokens = src->n_tokens;
    dst->n_hashed = src->n_hashed;
    dst->salt = src->salt;
    return RL_OK;
}
